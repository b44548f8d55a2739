"""The harness itself: blueque 1.0.1 from PyPI, in its venv, against the private Redis."""

import json

import pytest

from tests.interop.helpers import RUNS_KEY, wait_for

pytestmark = pytest.mark.interop


def test_blueque1_runs_its_own_tasks(bq1, r, start_bq1_runner):
    ok = bq1("enqueue", "q", json.dumps({"n": 1}))["id"]
    bad = bq1("enqueue", "q", json.dumps({"fail": True}))["id"]
    runner = start_bq1_runner("q")
    listener = runner.first_json_line()["listener"]

    wait_for(lambda: r.llen("blueque_complete_tasks_q") + r.llen("blueque_failed_tasks_q") == 2,
             15, runner.describe)
    assert r.smembers("blueque_listeners_q") == {listener}
    assert bq1("get-task", ok)["status"] == "complete"
    assert bq1("get-task", ok)["result"] == 'bq1:{"n": 1}'
    failed = bq1("get-task", bad)
    assert (failed["status"], failed["error"]) == ("failed", "bq1 failed on purpose")
    assert failed["types"]["pid"] == "int" and failed["types"]["created"] == "float"
    assert sorted(run.split()[1] for run in r.lrange(RUNS_KEY, 0, -1)) == sorted([ok, bad])
    assert runner.alive()
