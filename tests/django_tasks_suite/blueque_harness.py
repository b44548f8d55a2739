"""What Django's own tests/tasks run against in place of Django's backends (see README.md):
BluequeBackend, with tasks run by a real ``manage.py bq_listen --burst``."""

import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings

from django_blueque.backends import BluequeBackend
from django_blueque.conf import get_client

SUITE = Path(__file__).resolve().parent
ROOT = SUITE.parents[1]
MANAGE = ROOT / "testproject" / "manage.py"
TASKS_MODULE = "tasks.tasks"  # Django's test tasks: not an installed app's module
LOG_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ([A-Z]+) (\S+): (.*)$")
FRAMEWORK_LOGGERS = ("django.tasks", "django_tasks")


class QueuedBackend(BluequeBackend):
    """In place of DummyBackend: enqueued tasks wait in Redis (no listener runs them)."""

    def __init__(self, alias, params):
        super().__init__(alias, params)
        # what OPTIONS["TASK_MODULES"] gives the listener; here, without changing ``options``,
        # which the tests compare with {}
        self.task_modules = (TASKS_MODULE,)

    def clear(self):
        """DummyBackend.clear(): forget every task (the test's private Redis database)."""
        get_client().redis.flushdb()

    @property
    def results(self):
        """DummyBackend.results: the results of the tasks waiting, in enqueue order."""
        client = get_client()
        ids = []
        for queue in self.blueque_queues():
            ids += client.redis.lrange(client.keys.pending(queue), 0, -1)
            ids += client.redis.zrange(client.keys.scheduled(queue), 0, -1)
        return sorted((self.get_result(task_id) for task_id in ids),
                      key=lambda result: result.enqueued_at)


class BurstBackend(QueuedBackend):
    """In place of ImmediateBackend: each enqueue is followed by a real `bq_listen --burst`,
    whose Tasks-framework log records are replayed in this process (assertLogs sees them)."""

    def enqueue(self, task, args, kwargs):
        result = super().enqueue(task, args, kwargs)
        replay_logs(run_listener())
        result.refresh()
        return result


def run_listener():
    """Run `manage.py bq_listen --burst` with this process's TASKS (its Blueque backends, as
    BluequeBackend with OPTIONS naming the test tasks' module), USE_TZ and TIME_ZONE."""
    tasks = {alias: {**params, "BACKEND": "django_blueque.backends.BluequeBackend",
                     "OPTIONS": {"TASK_MODULES": [TASKS_MODULE]}}
             for alias, params in settings.TASKS.items()
             if params.get("BACKEND", "").startswith(__name__ + ".")}
    overrides = {"TASKS": tasks, "USE_TZ": settings.USE_TZ, "TIME_ZONE": settings.TIME_ZONE}
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, BLUEQUE_URL=settings.BLUEQUE["URL"],
                   BLUEQUE_TEST_TASKS=json.dumps(overrides),
                   DJANGO_SETTINGS_MODULE="tests.django_app.tasks_settings",
                   PYTHONPATH=os.pathsep.join([str(ROOT), str(SUITE)]),
                   BLUEQUE_DB_PATH=str(Path(scratch) / "db.sqlite3"))
        done = subprocess.run([sys.executable, str(MANAGE), "bq_listen", "--burst",
                               "--noreload"], env=env, capture_output=True, text=True,
                              timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"bq_listen --burst exited {done.returncode}:\n{done.stdout}"
                           f"{done.stderr}")
    return done.stderr


def replay_logs(output):
    """Log again, here, the records of Django's Tasks loggers in a listener's output (with the
    traceback lines that follow one)."""
    records = []
    for line in output.splitlines():
        start = LOG_START.match(line)
        if start:
            records.append([start[1], start[3]] if start[2] in FRAMEWORK_LOGGERS else None)
        elif records and records[-1] is not None:
            records[-1][1] += "\n" + line
    logger = logging.getLogger(FRAMEWORK_LOGGERS[0])
    for level, message in filter(None, records):
        logger.log(logging.getLevelNamesMapping()[level], "%s", message)
