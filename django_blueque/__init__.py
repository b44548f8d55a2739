"""django_blueque: very long tasks for Django on Redis, speaking the Blueque protocol."""

__version__ = "0.1.0"
