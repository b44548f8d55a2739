"""Django settings of the soak's processes: the test project's, with the soak's tasks app, its
Redis (a URL, or Sentinels) from the environment the harness sets, and short intervals so that
faults are noticed and recovered within the run."""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "demo"] + ["soak"]

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.environ.get("SOAK_DB", ":memory:")}}

SOAK_EVENTS = os.environ.get("SOAK_EVENTS", os.devnull)
"""The side channel: one line per task start and end, appended (O_APPEND) by task processes."""

if os.environ.get("SOAK_SENTINELS"):
    _redis = {"SENTINELS": [("127.0.0.1", int(port))
                            for port in os.environ["SOAK_SENTINELS"].split(",")],
              "SERVICE_NAME": os.environ.get("SOAK_SERVICE", "soak"),
              # A connection that bypasses Sentinel (issue 9, defect 11) would go to redis-py's
              # default, localhost:6379, where someone's real Redis may live: send it to a
              # closed port instead, where it fails loudly. Sentinel-made connections replace
              # host and port with the primary's.
              "OPTIONS": {"host": "127.0.0.1", "port": int(os.environ["SOAK_CLOSED_PORT"])}}
else:
    _redis = {"URL": os.environ.get("SOAK_REDIS_URL", "redis://127.0.0.1:1/0")}

BLUEQUE = {
    **_redis,
    # every task survives one kill by the soak; a designed failure is retried as designed
    "RETRIES": 2,
    "BACKOFF": 1,
    "RETENTION": None,  # the ledger reads every task back at the end
    "QUEUES": {"soak.flaky": {"RETRIES": 3}, "soak.doomed": {"RETRIES": 1},
               # the limits the ledger checks were never exceeded (issue 39)
               "soak.limited": {"MAX_RUNNING": 2}, "soak.keyed": {"MAX_RUNNING_PER_KEY": 1}},
    "SCHEDULER_INTERVAL": 0.5,
    "REAPER_INTERVAL": 2.0,
    "KILL_GRACE": 5,
}
