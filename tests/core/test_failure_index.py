"""The failed-by-type index (issue 14): each queue's failed tasks by error type, kept by every
script that fails a task or takes one out of the failed list, so that the admin's filtered
failed list costs what one page costs."""

import pytest

TYPES = "blueque_error_types_q"


def of_type(error_type):
    return f"blueque_failed_of_type_q {error_type}"


def fail(proto, task_id, error_type, token="tok"):
    assert proto.reserve("q", "host-a_101", token)[0] == task_id
    proto.start("q", task_id, "host-a_101", 42, token)
    return proto.finish("q", task_id, listener_id="host-a_101", pid=42, token=token,
                        outcome="failed", value="boom", error_type=error_type,
                        retryable=False)


@pytest.fixture
def failed(client):
    """Five failed tasks of q: three ValueError, one KeyError, one cancelled."""
    proto, queue = client.protocol, client.get_queue("q")
    ids = {}
    for name, error_type in [("v1", "builtins.ValueError"), ("k1", "builtins.KeyError"),
                             ("v2", "builtins.ValueError"), ("v3", "builtins.ValueError")]:
        ids[name] = queue.enqueue(name)
        assert fail(proto, ids[name], error_type) == "failed"
    ids["c1"] = queue.enqueue("c1")
    assert client.cancel(ids["c1"]) == "cancelled"
    return ids


def test_each_failure_is_indexed_by_its_type_newest_first(client, r, failed):
    assert r.zrevrange(of_type("builtins.ValueError"), 0, -1) == [
        failed["v3"], failed["v2"], failed["v1"]]
    assert r.zrange(of_type("builtins.KeyError"), 0, -1) == [failed["k1"]]
    assert r.zrange(of_type("django_blueque.Cancelled"), 0, -1) == [failed["c1"]]
    assert r.zrevrange(TYPES, 0, -1) == ["django_blueque.Cancelled", "builtins.ValueError",
                                         "builtins.KeyError"]


def test_a_retry_a_delete_and_a_bulk_job_take_tasks_out_of_it(client, r, failed):
    proto = client.protocol
    assert proto.admin.retry("q", failed["k1"]) == 1
    assert not r.exists(of_type("builtins.KeyError"))
    assert "builtins.KeyError" not in r.zrange(TYPES, 0, -1)
    assert proto.admin.delete_finished("q", failed["v1"]) == 1
    assert r.zrange(of_type("builtins.ValueError"), 0, -1) == [failed["v2"], failed["v3"]]
    assert proto.admin.bulk_start("job", "retry", "q", "failed", "admin", 60, with_cancelled=True)
    while proto.admin.bulk_step("job", "q", "failed", 2, 60)[0] == "running":
        pass
    assert r.zrange(TYPES, 0, -1) == []
    assert not r.keys("blueque_failed_of_type_*")


def test_a_task_failed_again_after_a_retry_is_indexed_once(client, r, failed):
    proto = client.protocol
    assert proto.admin.retry("q", failed["v1"]) == 1
    assert fail(proto, failed["v1"], "builtins.ValueError", token="tok2") == "failed"
    assert r.zcard(of_type("builtins.ValueError")) == 3
    assert r.zrevrange(of_type("builtins.ValueError"), 0, 0) == [failed["v1"]]


def test_expired_failed_tasks_leave_the_index(client, r, failed):
    for task_id in failed.values():
        r.hset(f"blueque_task_{task_id}", "expires", "1")
    assert client.protocol.upkeep.expire_finished("q", "failed") == 5
    assert r.zrange(TYPES, 0, -1) == []
    assert not r.keys("blueque_failed_of_type_*")


def test_a_cancel_while_reserved_is_indexed_when_the_start_fails_it(client, r):
    proto = client.protocol
    task_id = client.get_queue("q").enqueue("x")
    proto.reserve("q", "host-a_101", "tok")
    assert client.cancel(task_id) == "requested"
    assert proto.start("q", task_id, "host-a_101", 42, "tok") == -1
    assert r.zrange(of_type("django_blueque.Cancelled"), 0, -1) == [task_id]


@pytest.mark.parametrize("garbage_key", [TYPES, of_type("builtins.ValueError")])
def test_an_index_of_the_wrong_type_never_fails_a_task_end(client, r, garbage_key):
    """The index is a view: garbage there leaves it alone, and the failure is recorded."""
    r.set(garbage_key, "not a zset")
    task_id = client.get_queue("q").enqueue("x")
    assert fail(client.protocol, task_id, "builtins.ValueError") == "failed"
    assert client.get_task(task_id).status == "failed"
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]
    assert client.protocol.admin.retry("q", task_id) == 1
    assert r.get(garbage_key) == "not a zset"
