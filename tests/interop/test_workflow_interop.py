"""The real blueque 1.0.1 beside our dependencies (issue 40): its runner never takes a task
waiting for its dependencies, and runs it once our end of the last dependency released it."""

import time

from django_blueque.core import Client, reap
from tests.interop.test_interop import Q, params, runs, wait_finished, wait_listener


def test_a_blueque1_runner_never_takes_a_waiting_task_and_runs_it_once_released(
        bq1, r, redis_url, start_bq1_runner):
    client = Client(redis_url)
    gate = client.get_queue("gate").enqueue("first")  # no listener on this queue yet
    waiting = client.get_queue(Q).enqueue(params(n=1), depends_on=[gate])
    plain = client.get_queue(Q).enqueue(params(n=2))
    runner = start_bq1_runner(Q)
    wait_listener(r, runner)
    wait_finished(r, [plain], runner)
    time.sleep(2)  # blueque 1.0 polls its pending list every second: give it two looks
    assert client.get_task(waiting).status == "waiting"
    assert [ran for _worker, ran, _pid in runs(r)] == [plain]
    assert bq1("get-task", waiting)["status"] == "waiting"  # 1.0 reads it, and leaves it
    assert client.protocol.reserve("gate", "us_1", "tok")[0] == gate
    client.protocol.start("gate", gate, "us_1", 7, "tok")
    assert client.protocol.finish("gate", gate, listener_id="us_1", pid=7, token="tok",
                                  outcome="complete", value="done") == "complete"
    task = wait_finished(r, [waiting], runner)[waiting]
    assert task["status"] == "complete" and task["result"] == f"bq1:{params(n=1)}"
    assert [ran for _worker, ran, _pid in runs(r)] == [plain, waiting]


def test_a_dependency_ended_by_a_blueque1_runner_releases_its_dependents_at_the_next_reap(
        r, redis_url, start_bq1_runner):
    """blueque 1.0's scripts know nothing of dependents: its end of a dependency leaves them
    waiting. The reaper finds such ends (a waiting task still listed as a dependent of a task
    that ended) and settles them as our end would have: a success releases, a failure cancels."""
    client = Client(redis_url)
    ok, bad = client.get_queue(Q).enqueue(params(n=1)), client.get_queue(Q).enqueue(
        params(fail=True))
    after_ok = client.get_queue("later").enqueue("next", depends_on=[ok])
    after_bad = client.get_queue("later").enqueue("never", depends_on=[bad])
    runner = start_bq1_runner(Q)
    wait_listener(r, runner)
    wait_finished(r, [ok, bad], runner)
    before = {key: r.dump(key) for key in r.keys("*") if not key.startswith("blueque_listener")}
    would = reap(client, dry_run=True)  # says so, and changes nothing
    assert sorted((a.what, a.task_id) for a in would if "dependents" in a.what) == sorted(
        [("would settle its dependents", ok), ("would settle its dependents", bad)])
    assert {key: r.dump(key) for key in before} == before
    assert client.get_task(after_ok).status == "waiting"
    reap(client)  # one pass: nothing lapsed here, so it returns at once
    assert client.get_task(after_ok).status == "pending"
    released = client.get_task(after_bad)
    assert released.status == "failed" and f"its dependency {bad} failed" in released.error
    assert client.protocol.reserve("later", "us_1", "tok")[0] == after_ok
