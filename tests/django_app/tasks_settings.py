"""testproject's settings with a Tasks backend; a test may give TASKS, USE_TZ and TIME_ZONE as
JSON in BLUEQUE_TEST_TASKS (the same ones its own process overrides), for its bq_listen."""

import json
import os

from testproject.settings import *  # noqa: F403

TASKS = {"default": {"BACKEND": "django_blueque.backends.BluequeBackend",
                     "QUEUES": ["default", "other"],
                     "OPTIONS": {"TASK_MODULES": ["tests.django_app.tasks_framework"]}}}
globals().update(json.loads(os.environ.get("BLUEQUE_TEST_TASKS", "{}")))

# Django's own log lines of the Tasks framework ("Task id=... state=RUNNING"), on stderr
# ("django_tasks": the backport's logger on Django 5.2)
LOGGING["loggers"].update({name: {"handlers": ["console"], "level": "DEBUG"}  # noqa: F405
                           for name in ("django.tasks", "django_tasks")})
