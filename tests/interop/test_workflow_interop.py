"""The real blueque 1.0.1 beside our dependencies (issue 40): its runner never takes a task
waiting for its dependencies, and runs it once our end of the last dependency released it."""

import time

from django_blueque.core import Client
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
