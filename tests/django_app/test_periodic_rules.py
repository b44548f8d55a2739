"""Periodic tasks are called with no arguments, and cron reads the project's TIME_ZONE
(issue 9, defect 10)."""

import datetime
import os
import zoneinfo

import pytest
import redis

from django_blueque import blueque_task, registry
from django_blueque.registry import Periodic
from django_blueque.services import enqueue_periodic, latest_due, next_periodic_runs

from .conftest import MANAGE


@pytest.fixture(autouse=True)
def registry_restored():
    """The tasks these tests register are gone after them."""
    saved = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(saved)


def needs_an_argument(video_id):
    return video_id


def raw_task(task):
    return task.id


def defaults_only(limit=10, **extra):
    return limit


@pytest.mark.parametrize("func, options", [
    (needs_an_argument, {"periodic": 60}),
    (needs_an_argument, {"cron": "*/5 * * * *"}),
    (raw_task, {"periodic": 60, "raw": True}),
])
def test_a_periodic_task_that_cannot_be_called_bare_is_refused_at_decoration(func, options):
    """Before: accepted, then raising in the scheduler on every pass (and, with
    --with-scheduler, before the reaper's pass, so that node never reaped again)."""
    with pytest.raises(TypeError, match="called with no arguments"):
        blueque_task(queue=f"periodic-{func.__name__}", **options)(func)


def test_a_periodic_task_with_defaults_is_accepted():
    task = blueque_task(queue="periodic-defaults", periodic=60)(defaults_only)
    assert task.periodic == Periodic(interval=60.0)


def test_cron_is_read_in_time_zone(settings):
    settings.USE_TZ = True
    settings.TIME_ZONE = "Europe/Paris"
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    noon = datetime.datetime(2026, 1, 15, 12, 0, tzinfo=paris).timestamp()
    nine = datetime.datetime(2026, 1, 15, 9, 0, tzinfo=paris).timestamp()
    assert latest_due(Periodic(cron="0 9 * * *"), noon) == nine  # 08:00 UTC, not 09:00
    settings.TIME_ZONE = "UTC"
    assert latest_due(Periodic(cron="0 9 * * *"), noon) == nine + 3600


def test_next_runs_follow_time_zone(settings):
    settings.USE_TZ = True
    settings.TIME_ZONE = "America/New_York"
    task = blueque_task(queue="periodic-ny", cron="30 6 * * *")(defaults_only)
    runs = dict((t.queue, when) for t, when in next_periodic_runs(
        datetime.datetime(2026, 7, 1, 12, 0, tzinfo=datetime.UTC).timestamp()))
    expected = datetime.datetime(2026, 7, 2, 6, 30, tzinfo=zoneinfo.ZoneInfo("America/New_York"))
    assert runs[task.queue] == expected.timestamp()


NEVER = "0 0 31 2 *"  # croniter reads it, but February has no 31st


def test_a_cron_that_never_fires_is_refused_at_decoration():
    """Before: accepted, then every scheduler pass raised CroniterBadDateError (issue 38)."""
    with pytest.raises(ValueError, match=r"'0 0 31 2 \*' never fires"):
        blueque_task(queue="periodic-never", cron=NEVER)(defaults_only)


def test_manage_py_check_refuses_a_cron_that_never_fires(manage, tmp_path):
    app = tmp_path / "nevercron"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(
        "from django_blueque import blueque_task\n\n\n"
        f"@blueque_task(queue='nevercron.leap', cron={NEVER!r})\n"
        "def leap():\n    return 1\n")
    (tmp_path / "never_settings.py").write_text(
        "from testproject.settings import *  # noqa: F403\n\n"
        "INSTALLED_APPS = [*INSTALLED_APPS, 'nevercron']  # noqa: F405\n")
    manage.env.update(DJANGO_SETTINGS_MODULE="never_settings",
                      PYTHONPATH=os.pathsep.join([str(tmp_path), str(MANAGE.parent.parent)]))
    done = manage.run("check")
    assert done.returncode != 0
    assert "nevercron.tasks.leap: cron expression '0 0 31 2 *' never fires" in done.stderr


def test_one_periodic_task_that_fails_does_not_stop_the_others(blueque, redis_url, caplog):
    """Each periodic task in its own try: a bad entry (here one made before the rule, its
    Periodic set after decoration) is logged once while it stays bad, and skipped."""
    bad = blueque_task(queue="periodic-a-bad", cron="0 9 * * *")(defaults_only)
    bad.periodic = Periodic(cron=NEVER)
    good = blueque_task(queue="periodic-b-good", periodic=60)(defaults_only)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    at = 1_800_000_030.0
    enqueue_periodic(at)  # first sight: records the due times
    started = enqueue_periodic(at + 60) + enqueue_periodic(at + 120)
    enqueued = r.lrange(f"blueque_pending_tasks_{good.queue}", 0, -1)
    assert len(enqueued) == 2 and set(enqueued) <= set(started)
    logged = [record for record in caplog.records if bad.queue in record.getMessage()]
    assert len(logged) == 1 and "never fires" not in logged[0].getMessage()
    assert "CroniterBadDateError" in logged[0].getMessage()


def test_a_periodic_tasks_garbage_key_does_not_stop_the_others(blueque, redis_url, caplog):
    """A key of the wrong type is that task's fault (WRONGTYPE), not Redis being away."""
    bad = blueque_task(queue="periodic-a-garbage", periodic=60)(defaults_only)
    good = blueque_task(queue="periodic-b-fine", periodic=60)(defaults_only)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.rpush(f"blueque_periodic_{bad.queue}", "garbage")
    at = 1_800_000_030.0
    enqueue_periodic(at)
    enqueue_periodic(at + 60)
    assert r.llen(f"blueque_pending_tasks_{good.queue}") == 1
    assert [record.levelname for record in caplog.records
            if bad.queue in record.getMessage()] == ["ERROR"]
