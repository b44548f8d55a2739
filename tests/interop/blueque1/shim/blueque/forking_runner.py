"""blueque 1.0's ``from blueque.forking_runner import ForkingRunner``, re-exported."""

from django_blueque.core import ForkingRunner  # noqa: F401
