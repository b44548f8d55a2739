"""Making tasks in Redis as producers and listeners do, and reading responses."""

import json
import time


def fail_task(client, queue, parameters='{"n": 1}', error="boom", traceback=""):
    """Enqueue a task and run it to failure as a listener would; returns its id."""
    task_id = client.get_queue(queue).enqueue(parameters)
    run(client, queue, "failed", error, traceback=traceback)
    return task_id


def complete_task(client, queue, parameters='{"n": 1}', result='{"ok": true}'):
    task_id = client.get_queue(queue).enqueue(parameters)
    run(client, queue, "complete", result)
    return task_id


def start_task(client, queue, parameters='{"n": 1}', listener="node-1_4242", pid=4343):
    """Enqueue, reserve and start a task as our listener does; returns (id, token)."""
    task_id = client.get_queue(queue).enqueue(parameters)
    client.protocol.heartbeat(listener, [queue], {"host": "node-1", "pid": 4242})
    token = "token-" + task_id
    taken = client.protocol.reserve(queue, listener, token)
    assert taken[0] == task_id
    assert client.protocol.start(queue, task_id, listener, pid, token) not in (0, -1)
    return task_id, token


def run(client, queue, outcome, value, listener="node-1_4242", pid=4343, traceback=""):
    """Run the oldest pending task of ``queue`` to ``outcome`` as our listener would."""
    client.protocol.heartbeat(listener, [queue], {"host": "node-1", "pid": 4242})
    token = "token"
    task_id = client.protocol.reserve(queue, listener, token)[0]
    client.protocol.start(queue, task_id, listener, pid, token)
    assert client.protocol.finish(
        queue, task_id, listener_id=listener, pid=pid, token=token, outcome=outcome,
        value=value, error_type="builtins.RuntimeError" if outcome == "failed" else "",
        traceback=traceback, retryable=False) == outcome
    return task_id


def body(response):
    return response.content.decode()


def as_json(response):
    return json.loads(response.content)


def enqueue_v1(redis, queue, parameters, task_id, created=1_700_000_000.0):
    """A task written as a blueque 1.0 producer writes it (its exact transaction)."""
    with redis.pipeline() as pipe:
        pipe.hset(f"blueque_task_{task_id}", mapping={
            "status": "pending", "queue": queue, "parameters": parameters,
            "created": repr(created), "updated": repr(created)})
        pipe.zincrby("blueque_queues", 0, queue)
        pipe.lpush(f"blueque_pending_tasks_{queue}", task_id)
        pipe.execute()


def messages_of(response):
    """The Django messages the request of ``response`` added (not older unread ones)."""
    return [str(message) for message in response.wsgi_request._messages._queued_messages]


def url(path, **query):
    from urllib.parse import urlencode

    return f"/admin/django_blueque/queue/{path}" + (f"?{urlencode(query)}" if query else "")


def fill_failed(client, queue, count, started=None, prefix="task"):
    """``count`` failed tasks, written in one pipeline (as finish.lua leaves them)."""
    keys = client.keys
    stamp = repr(started or time.time() - 60)
    ids = [f"{queue}-{prefix}-{n}" for n in range(count)]
    with client.redis.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.hset(keys.task(task_id), mapping={
                "status": "failed", "queue": queue, "parameters": "{}", "error": "boom",
                "created": stamp, "updated": stamp, "finished": stamp})
            pipe.lpush(keys.failed(queue), task_id)
        pipe.zincrby(keys.queues, 0, queue)
        pipe.execute()
    return ids
