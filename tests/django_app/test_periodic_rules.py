"""Periodic tasks are called with no arguments, and cron reads the project's TIME_ZONE
(issue 9, defect 10)."""

import datetime
import zoneinfo

import pytest

from django_blueque import blueque_task, registry
from django_blueque.registry import Periodic
from django_blueque.services import latest_due, next_periodic_runs


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
