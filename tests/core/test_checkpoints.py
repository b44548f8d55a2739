"""Checkpoints (issue 39, part 4): a run saves its state, a later run resumes from it. Real
listeners, real task processes, a real SIGKILL."""

import json
import time

import pytest

from devtools.servers import RedisServer
from django_blueque.core import Client, current_task
from django_blueque.core.checkpoints import (
    MAX_CHECKPOINT_BYTES,
    CheckpointError,
    decode_checkpoint,
    encode_checkpoint,
    save_checkpoint,
)
from tests.core.helpers import Runner, wait_for
from tests.core.test_runner import finished, job, started


def test_sigkilled_task_resumes_at_its_checkpoint(client, r, start_runner, runs):
    task_id = client.get_queue("q").enqueue(job(steps=[5, 3]), retries=1)
    task = finished(client, task_id, start_runner())
    assert (task.status, task.attempts) == ("complete", 2)
    assert task.last_error.startswith("process killed by signal 9")
    # the first run began at step 1 and was killed after checkpointing step 3; the second
    # began at step 4, not at 1
    assert r.lrange(f"{task_id}:began", 0, -1) == ["1", "4"]
    assert r.lrange(f"{task_id}:steps", 0, -1) == ["1", "2", "3", "4", "5"]
    assert json.loads(task.checkpoint) == {"step": 5}
    assert task.checkpoint_at >= task.started
    first, second = runs()
    assert first["pid"] != second["pid"]


def test_a_checkpoint_waits_while_redis_restarts(tmp_path, tag):
    """A checkpoint is the work done: one made while Redis is away is stored once it answers
    (a persistent Redis, restarted), not dropped and not failing the task."""
    server = RedisServer(persistent=True).start()
    client = Client(server.url)
    runner = Runner(server.url, "q", tmp_path, tag)
    try:
        task_id = client.get_queue("q").enqueue(job(steps=[3, 0], step_sleep=3))
        wait_for(lambda: client.get_task(task_id).checkpoint == '{"step":1}', 20,
                 runner.describe)
        server.stop()  # step 2's checkpoint comes while Redis is away
        time.sleep(4.5)
        server.start()
        task = finished(client, task_id, runner, timeout=60)
        assert (task.status, task.attempts) == ("complete", 1)
        assert json.loads(task.checkpoint) == {"step": 3}
        assert client.redis.lrange(f"{task_id}:steps", 0, -1) == ["1", "2", "3"]
        assert f"task {task_id}: saving a checkpoint: Redis unavailable" in runner.output()
    finally:
        runner.popen.kill()
        runner.wait(10)
        runner.popen.stdout.close()
        client.redis.close()
        server.close()


def test_a_checkpoint_waiting_for_redis_gives_up_when_the_run_is_told_to_stop():
    """Redis away longer than a lease: the run's lease is cut off (should_stop() turns true)
    while its checkpoint waits. The checkpoint is not saved and says so (False); the task's code
    is told to stop, never failed with the outage's error (a soak's checkpointing task failed
    with "Timeout reading from socket" when Redis was stopped for 20 s)."""
    server = RedisServer().start()
    client = Client(server.url, socket_timeout=0.5)
    server.stop()  # nothing answers on its port now
    looks = []
    try:
        saved = save_checkpoint(client.protocol.runs, "some-task", "its-token", '{"step": 2}',
                                lambda: looks.append(1) or len(looks) > 2)
        assert saved is False and len(looks) == 3
    finally:
        client.redis.close()
        server.close()


def test_a_first_run_has_no_checkpoint(client, start_runner):
    task_id = client.get_queue("q").enqueue(job(read_checkpoint=True))
    task = finished(client, task_id, start_runner())
    assert (task.status, task.result) == ("complete", "null")


def test_a_stale_token_cannot_overwrite_a_checkpoint(client, r, start_runner):
    task_id = client.get_queue("q").enqueue(job(steps=[1, 0], wait_for="gate"))
    runner = start_runner()
    task = started(client, task_id, runner)
    protocol = client.protocol
    assert not protocol.runs.save_checkpoint(task_id, "a-stale-token", '{"step": 99}')
    assert json.loads(client.get_task(task_id).checkpoint) == {"step": 1}
    assert protocol.runs.save_checkpoint(task_id, task.lease, '{"step": 2}')  # the run's own token
    r.set("gate", 1)
    task = finished(client, task_id, runner)
    assert task.status == "complete"
    # once the run ended, even its own token no longer writes
    assert not protocol.runs.save_checkpoint(task_id, task.lease or "", '{"step": 3}')
    assert json.loads(client.get_task(task_id).checkpoint) == {"step": 2}


def test_garbage_in_the_checkpoint_field_fails_the_run_readably(client, r, start_runner):
    queue = client.get_queue("q")
    task_id = queue.enqueue(job(read_checkpoint=True))  # no listener yet: it waits
    r.hset(client.protocol.keys.task(task_id), "checkpoint", "{not json")
    runner = start_runner()
    task = finished(client, task_id, runner)
    assert task.status == "failed"
    assert "its checkpoint field holds no JSON" in task.error
    # the listener carries on
    assert finished(client, queue.enqueue(job()), runner).status == "complete"


def test_retry_keeps_the_checkpoint_and_start_over_clears_it(client, r, start_runner):
    task_id = client.get_queue("q").enqueue(job(steps=[2, 0], **{"raise": "boom"}))
    runner = start_runner()
    assert finished(client, task_id, runner).status == "failed"
    protocol = client.protocol
    assert protocol.admin.retry("q", task_id) == 1
    task = finished(client, task_id, runner)
    assert r.lrange(f"{task_id}:began", 0, -1) == ["1", "3"]  # resumed, nothing left to do
    assert json.loads(task.checkpoint) == {"step": 2}
    assert protocol.admin.clear_checkpoint(task_id)
    assert client.get_task(task_id).checkpoint is None
    assert protocol.admin.retry("q", task_id) == 1
    finished(client, task_id, runner)
    assert r.lrange(f"{task_id}:began", 0, -1) == ["1", "3", "1"]  # started over


def test_start_over_is_refused_while_a_run_holds_the_task(client, r, start_runner):
    task_id = client.get_queue("q").enqueue(job(steps=[1, 0], wait_for="gate"))
    runner = start_runner()
    started(client, task_id, runner)
    assert not client.protocol.admin.clear_checkpoint(task_id)
    assert not client.protocol.admin.clear_checkpoint("no-such-task")
    r.set("gate", 1)
    assert json.loads(finished(client, task_id, runner).checkpoint) == {"step": 1}


def test_checkpoint_refuses_what_is_not_json_or_too_large():
    with pytest.raises(TypeError, match="a checkpoint must be JSON"):
        encode_checkpoint({"when": object()})
    with pytest.raises(ValueError, match="a checkpoint must be JSON"):
        encode_checkpoint(float("nan"))
    with pytest.raises(ValueError, match=f"over the limit of {MAX_CHECKPOINT_BYTES} bytes"):
        encode_checkpoint("x" * MAX_CHECKPOINT_BYTES)
    assert json.loads(encode_checkpoint({"step": 3})) == {"step": 3}
    assert decode_checkpoint("t", None) is None
    with pytest.raises(CheckpointError, match="task t: its checkpoint field holds no JSON"):
        decode_checkpoint("t", "\x00garbage")


def test_outside_a_task_checkpoints_are_checked_and_kept_nowhere():
    stand_in = current_task()
    assert not stand_in and stand_in.checkpoint_state is None
    assert stand_in.checkpoint({"step": 1}) is None
    assert stand_in.checkpoint_state is None  # a plain call is always a first run
    with pytest.raises(ValueError, match="over the limit"):
        stand_in.checkpoint("x" * (MAX_CHECKPOINT_BYTES + 1))
