"""testproject's settings, on the Sentinel set-up the environment names (BLUEQUE_SENTINELS:
comma-separated ports on 127.0.0.1), with the failover tests' task app."""

import os

from testproject.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.django_app.failover_app"]  # noqa: F405

BLUEQUE = {
    "SENTINELS": [("127.0.0.1", int(port))
                  for port in os.environ.get("BLUEQUE_SENTINELS", "26379").split(",")],
    "SERVICE_NAME": "mymaster",
    "OPTIONS": {"socket_timeout": 5},
    "REAPER_INTERVAL": 1.0,
    "WAIT_REPLICAS": int(os.environ.get("BLUEQUE_WAIT_REPLICAS", "0")),
}
if os.environ.get("BLUEQUE_DEFAULT_PORT"):
    # where a connection that bypassed Sentinel would go: a decoy server in the tests
    BLUEQUE["OPTIONS"]["port"] = int(os.environ["BLUEQUE_DEFAULT_PORT"])
