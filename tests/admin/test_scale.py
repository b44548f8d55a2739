"""A page costs Redis work proportional to what it shows, not to what is stored, in a fixed
number of round trips."""

import pytest
import redis.connection

from .helpers import fill_failed, start_task, url


@pytest.fixture
def round_trips(monkeypatch):
    """Counts the writes to Redis sockets: one per command or per pipeline."""
    sent = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        sent.append(command)
        return original(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    return sent


def commands(admin, r, path):
    """{command: calls} of Redis while the page was made (commands run by scripts included)."""
    r.config_resetstat()
    assert admin.get(path).status_code == 200
    return {name.removeprefix("cmdstat_"): stats["calls"]
            for name, stats in r.info("commandstats").items()
            if name not in ("cmdstat_info", "cmdstat_config")}


def pages(task_id):
    return [url(""), url("", name="q", state="failed"),
            url("", name="q", state="failed", p=2),
            url("", name="q", state="started"), url("", name="q", state="reserved"),
            url(f"tasks/{task_id}/"), url("listeners/"), url("metrics/")]


def test_the_work_of_a_page_does_not_grow_with_stored_tasks(admin, blueque, r):
    fill_failed(blueque, "q", 250)
    start_task(blueque, "q")
    for path in pages("q-task-0"):
        admin.get(path)  # connections made and scripts loaded
    small = {path: commands(admin, r, path) for path in pages("q-task-0")}
    fill_failed(blueque, "q", 20000, prefix="more")
    large = {path: commands(admin, r, path) for path in pages("q-task-0")}
    assert small == large
    everything = set().union(*large.values())
    assert not everything & {"keys", "scan", "hscan", "sscan", "zscan", "sort"}
    listing = large[url("", name="q", state="failed")]
    assert listing["hmget"] == 100 and listing["lrange"] == 1


def test_a_page_is_a_few_round_trips_whatever_it_shows(admin, blueque, r, round_trips):
    fill_failed(blueque, "q", 300)
    for _ in range(5):
        start_task(blueque, "q")
    for path in pages("q-task-0"):
        admin.get(path)  # scripts loaded, sessions warm
        round_trips.clear()
        assert admin.get(path).status_code == 200
        # the Prometheus view reads its run-time histograms in two more pipelines (the
        # newest finished ids, then their times): still a constant number
        assert len(round_trips) <= (6 if path == url("metrics/") else 4), path
