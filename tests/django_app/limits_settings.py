"""testproject's settings with a Tasks backend (tasks_settings) and the limits' tasks app; the
test gives BLUEQUE's QUEUES as JSON in BLUEQUE_TEST_QUEUES, for its bq_listen."""

import json
import os

from tests.django_app.tasks_settings import *  # noqa: F403
from tests.django_app.tasks_settings import BLUEQUE, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.django_app.limits_app"]
BLUEQUE = {**BLUEQUE, "QUEUES": json.loads(os.environ.get("BLUEQUE_TEST_QUEUES", "{}"))}
