"""Dependencies with real listeners (issue 40): a dependent never starts before every
dependency completed, runs once, also when a listener is SIGKILLed between two steps."""

import json
import os
import signal
import time

from tests.core.callbacks import RUNS_KEY
from tests.core.helpers import SHORT_TIMINGS, task_processes_of, wait_for
from tests.core.test_long_tasks import reaper  # noqa: F401  (a fixture)


def job(**todo):
    return json.dumps(todo)


def runs(r):
    return [json.loads(run) for run in r.lrange(RUNS_KEY, 0, -1)]


def finished(client, task_id, runner, timeout=60):
    return wait_for(lambda: (lambda t: t if t.status in ("complete", "failed") else None)(
        client.get_task(task_id)), timeout, runner.describe)


def test_a_chain_and_a_fan_in_across_queues_run_in_order_once(client, r, start_runner):
    runner = start_runner(["q", "q2", "q3"], concurrency=3)
    first = client.get_queue("q").enqueue(job(sleep=0.5, **{"return": "A"}))
    side = client.get_queue("q2").enqueue(job(sleep=1, **{"return": "B"}))
    both = client.get_queue("q3").enqueue(
        job(dependencies="seen", **{"return": "C"}), depends_on=[side, first])
    last = client.get_queue("q").enqueue(job(dependencies="seen"), depends_on=[both])
    assert client.get_task(both).status == "waiting"
    task = finished(client, last, runner)
    assert task.status == "complete"
    order = [run["id"] for run in runs(r)]
    assert sorted(order[:2]) == sorted([first, side]) and order[2:] == [both, last]
    seen = [json.loads(item) for item in r.lrange("seen", 0, -1)]
    assert seen == [{"id": both, "results": [[side, "B"], [first, "A"]]},
                    {"id": last, "results": [[both, "C"]]}]
    started = client.get_task(both).started
    assert started >= max(client.get_task(first).finished, client.get_task(side).finished)


def test_a_failing_step_cancels_the_chain_and_its_retry_revives_it(client, r, start_runner):
    runner = start_runner(["q", "q2"])
    first = client.get_queue("q").enqueue(job(fail_before=2))
    second = client.get_queue("q2").enqueue(job(), depends_on=[first])
    third = client.get_queue("q2").enqueue(job(), depends_on=[second])
    assert finished(client, third, runner).error == (
        f"cancelled: its dependency {second} was cancelled ({first} failed)")
    assert [run["id"] for run in runs(r)] == [first]
    assert client.get_queue("q").retry_task(client.get_task(first))
    assert finished(client, third, runner).status == "complete"
    assert [run["id"] for run in runs(r)] == [first, first, second, third]


def test_a_listener_killed_during_a_step_loses_nothing_and_runs_no_later_step_twice(
        client, r, start_runner, reaper):  # noqa: F811
    reaper()
    timings = json.dumps(SHORT_TIMINGS)
    killed = start_runner(["q", "q2"], timings=timings, kill_grace=2)
    first = client.get_queue("q").enqueue(job(wait_for="gate"), retries=1)
    second = client.get_queue("q2").enqueue(job(), depends_on=[first])
    third = client.get_queue("q2").enqueue(job(), depends_on=[second])
    wait_for(lambda: runs(r), 20, killed.describe)
    for pid in task_processes_of(killed.pid):
        os.kill(pid, signal.SIGKILL)
    killed.signal(signal.SIGKILL)
    assert client.get_task(second).status == "waiting"
    r.set("gate", 1)
    survivor = start_runner(["q", "q2"], timings=timings, kill_grace=2)
    task = finished(client, third, survivor)
    assert task.status == "complete"
    assert [run["id"] for run in runs(r)] == [first, first, second, third]
    assert client.get_task(first).attempts == 2


def test_a_step_after_a_group_of_20_runs_once_through_a_killed_listener_and_a_redis_restart(
        tmp_path, tag):
    """Two listeners run a group of 20; one is SIGKILLed with its task processes while the
    group ends, then Redis restarts (with persistence). The reaper (the other's duty) recovers
    the killed runs, which are retried; the step after the group starts once, after all 20."""
    import redis

    from devtools.servers import RedisServer
    from django_blueque.core import Client
    from tests.core.helpers import Runner

    server = RedisServer(persistent=True).start()
    client = Client(server.url)
    r = redis.Redis.from_url(server.url, decode_responses=True)
    timings = json.dumps(SHORT_TIMINGS)
    runners = []
    try:
        group = [client.get_queue("q").enqueue(job(sleep=0.5, n=n), retries=3)
                 for n in range(20)]
        after = client.get_queue("q2").enqueue(job(dependencies="seen"), depends_on=group)
        runners.append(Runner(server.url, ["q", "q2"], tmp_path, tag, duties=0.5,
                              timings=timings, concurrency=3))
        runners.append(Runner(server.url, ["q", "q2"], tmp_path, tag, timings=timings,
                              concurrency=3))

        def running_on_second():  # a run of the group in a process of the listener to kill
            processes = set(task_processes_of(runners[1].pid))
            return [run for run in runs(r) if run["pid"] in processes and run["id"] in group]

        # the second listener (up later, on a loaded machine) may not have a task yet at the
        # 8th start, only its spare: then nothing would be killed but the spare
        wait_for(lambda: len(runs(r)) >= 8 and running_on_second(), 30, runners[1].describe)
        for pid in task_processes_of(runners[1].pid):
            os.kill(pid, signal.SIGKILL)
        runners[1].signal(signal.SIGKILL)
        server.stop()
        time.sleep(1)
        server.start()
        task = finished(client, after, runners[0], timeout=120)
        assert task.status == "complete", task.fields
        ran = [run["id"] for run in runs(r)]
        assert ran.count(after) == 1 and ran[-1] == after
        tasks = client.get_tasks(group)
        assert all(t.status == "complete" for t in tasks), [t.fields for t in tasks]
        assert any(t.attempts == 2 for t in tasks)  # the killed runs were recovered, run again
        assert task.started >= max(t.finished for t in tasks)
        seen = json.loads(r.lindex("seen", 0))
        assert [task_id for task_id, _result in seen["results"]] == group
    finally:
        for runner in runners:
            if runner.alive():
                runner.popen.kill()
            runner.wait(10)
            runner.popen.stdout.close()
        r.close()
        client.redis.close()
        server.close()
