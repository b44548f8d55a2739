"""django_blueque: very long tasks for Django on Redis, speaking the Blueque protocol.

The public surface::

    from django_blueque import blueque_task, get_result, current_task
"""

from .core import current_task
from .registry import blueque_task
from .results import get_result

__version__ = "0.1.0"

__all__ = ["blueque_task", "current_task", "get_result"]
