"""Cancelling every pending task of a queue as a resumable bulk job (issue 14's cancel by
predicate): the pending list, then the prioritized set, a batch at a time; tasks that arrive
meanwhile are left alone."""

import time

from django_blueque.core import bulk


def run_job(proto, batch):
    steps = 0
    while True:
        status, processed, total, affected = proto.admin.bulk_step("job", "q", "pending", batch, 60)
        steps += 1
        if status != "running":
            return status, processed, total, affected, steps


def test_every_pending_task_is_cancelled_in_batches_and_newcomers_are_left(client, r):
    proto, queue = client.protocol, client.get_queue("q")
    plain = [queue.enqueue(f"p{n}") for n in range(5)]
    prioritized = [queue.enqueue(f"h{n}", priority=priority)
                   for n, priority in enumerate((10, -3, 50))]
    unique = queue.enqueue("u", unique_key="k")
    later = queue.schedule("s", 2**31)
    assert proto.admin.bulk_start("job", "cancel", "q", "pending", "ops", 60)
    time.sleep(0.01)
    newcomers = [queue.enqueue("new"), queue.enqueue("new-high", priority=5)]
    status, processed, total, affected, steps = run_job(proto, 2)
    assert (status, total, affected) == ("done", 9, 9) and processed == 9 and steps >= 5
    for task_id in plain + prioritized + [unique]:
        task = client.get_task(task_id)
        assert (task.status, task.error_type) == ("failed", "django_blueque.Cancelled")
    assert sorted(r.lrange("blueque_failed_tasks_q", 0, -1)) == sorted(
        plain + prioritized + [unique])
    assert r.zcard("blueque_failed_of_type_q django_blueque.Cancelled") == 9
    assert r.hgetall("blueque_unique_q") == {}
    assert client.get_task(later).status == "scheduled"
    assert [client.get_task(task_id).status for task_id in newcomers] == ["pending"] * 2
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [newcomers[0]]
    assert r.zrange("blueque_prioritized_q", 0, -1) == [newcomers[1]]


def test_the_job_resumes_from_any_process_and_runs_once(client):
    proto, queue = client.protocol, client.get_queue("q")
    for n in range(7):
        queue.enqueue(f"p{n}", priority=n % 3)
    assert bulk.start_job(client, "cancel", "pending", "q", "ops")
    assert not bulk.start_job(client, "cancel", "pending", "q", "ops")  # running already
    first = proto.admin.bulk_step("cancel_pending_q", "q", "pending", 3, 60)
    assert first[0] == "running" and first[1] == 3
    assert bulk.advance_jobs(client, budget=5) == 1  # the reaper's loop ends it
    job = client.redis.hgetall("blueque_bulk_cancel_pending_q")
    assert (job["status"], job["processed"], job["affected"]) == ("done", "7", "7")


def test_tasks_held_for_their_concurrency_key_are_cancelled_too(client, r):
    from django_blueque.core.admission import Admission

    proto, queue = client.protocol, client.get_queue("q")
    keyed = [queue.enqueue(f"k{n}", concurrency_key="customer-7") for n in range(4)]
    running = proto.take("q", "host~ab_1", "tok", 100, Admission(max_running_per_key=1))
    assert running[0] == keyed[0]
    assert proto.take("q", "host~ab_1", "tok2", 101, Admission(max_running_per_key=1)) is None
    assert r.zcard("blueque_held_q") == 3
    assert proto.admin.bulk_start("job", "cancel", "q", "pending", "ops", 60)
    status, processed, total, affected, _ = run_job(proto, 2)
    assert (status, total, affected) == ("done", 3, 3)
    assert [client.get_task(task_id).status for task_id in keyed[1:]] == ["failed"] * 3
    assert r.zcard("blueque_held_q") == 0 and r.llen("blueque_pending_tasks_q") == 0
    assert client.get_task(keyed[0]).status == "started"
