"""A stand-in for the ``blueque`` 1.0 package that only re-exports the engine, to run code
written for blueque 1.0 (its own tests first of all) against django_blueque.core unchanged."""

from django_blueque.core import *  # noqa: F403
from django_blueque.core import __all__  # noqa: F401
