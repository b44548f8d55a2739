"""testproject's settings with no LOGGING of the project's own: the bq_* commands then set
up logging themselves (--log-format)."""

from testproject.settings import *  # noqa: F403

LOGGING = {}
