"""django_blueque: very long tasks for Django on Redis, speaking the Blueque protocol.

The public surface::

    from django_blueque import blueque_task, get_result, current_task

They are imported on first use, so ``django_blueque.core`` (the engine) loads without Django.
"""

__version__ = "0.1.0"

__all__ = ["blueque_task", "current_task", "get_result"]


def __getattr__(name):
    if name == "blueque_task":
        from .registry import blueque_task

        return blueque_task
    if name == "get_result":
        from .results import get_result

        return get_result
    if name == "current_task":
        from .core import current_task

        return current_task
    raise AttributeError(f"module 'django_blueque' has no attribute {name!r}")
