"""On Django 5.2, Django 6's ``django.tasks`` names for the ``django-tasks`` backport, so that
Django's own tests/tasks import unchanged (``tasks/__init__.py`` imports this module); its
log records, on the logger ``django_tasks``, go to ``django.tasks`` instead. Nothing is
done where ``django.tasks`` exists."""

import importlib.util
import logging
import sys
import types


class PassOn(logging.Handler):
    """Hands a record of the backport's logger to Django's, under Django's name."""

    def emit(self, record):
        record = logging.makeLogRecord({**record.__dict__, "name": "django.tasks"})
        logging.getLogger("django.tasks").handle(record)


def install():
    if importlib.util.find_spec("django.tasks") is not None:
        return
    import django_tasks
    from django_tasks import base, exceptions, signals
    from django_tasks.backends import base as backends_base

    renamed = types.ModuleType("django.tasks.exceptions")
    renamed.__dict__.update(vars(exceptions), InvalidTask=exceptions.InvalidTaskError,
                            InvalidTaskBackend=exceptions.InvalidTaskBackendError)
    sys.modules.update({"django.tasks": django_tasks, "django.tasks.base": base,
                        "django.tasks.exceptions": renamed, "django.tasks.signals": signals,
                        "django.tasks.backends.base": backends_base})
    backport_logger = logging.getLogger("django_tasks")
    backport_logger.handlers = [PassOn()]  # "django.tasks"'s own handlers show each record once
    backport_logger.propagate = False
    backport_logger.setLevel(logging.DEBUG)  # "django.tasks" (and assertLogs) decide


install()
