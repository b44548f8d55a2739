"""Error history (issue 14, seed 002): every failed run keeps its error (qualified type,
message, code, time, node, attempt, traceback), oldest first, not only the last one."""

import json

import pytest

from tests.core.helpers import wait_for


def test_a_task_failing_twice_then_succeeding_keeps_both_errors(client, r, start_runner):
    task_id = client.get_queue("q").enqueue(json.dumps({"fail_before": 3}), retries=2)
    runner = start_runner(concurrency=1)
    wait_for(lambda: client.get_task(task_id).status == "complete", 30, runner.describe)
    task = client.get_task(task_id)
    errors = task.errors
    assert [(e["type"], e["message"], e["code"], e["attempt"]) for e in errors] == [
        ("tests.core.callbacks.CodedError", "attempt 1 failed", "E1", 1),
        ("tests.core.callbacks.CodedError", "attempt 2 failed", "E2", 2)]
    assert all(e["node"] == runner.listener_id for e in errors)
    assert errors[0]["time"] < errors[1]["time"] <= float(task.fields["finished"])
    assert all("CodedError: attempt" in e["traceback"] for e in errors)
    assert task.attempts == 3


def test_every_failure_path_appends_and_a_final_failure_too(client, r):
    proto, queue = client.protocol, client.get_queue("q")
    task_id = queue.enqueue("x", retries=1)
    for attempt, (message, kind, code) in enumerate(
            [("lost", "ListenerLost", ""), ("boom", "builtins.ValueError", "42")], 1):
        assert proto.reserve("q", "host-a_101", f"tok{attempt}")[0] == task_id
        proto.start("q", task_id, "host-a_101", 42, f"tok{attempt}")
        proto.finish("q", task_id, listener_id="host-a_101", pid=42, token=f"tok{attempt}",
                     outcome="failed", value=message, error_type=kind, error_code=code,
                     traceback=f"trace {attempt}")
    task = client.get_task(task_id)
    assert task.status == "failed"
    assert [(e["message"], e["type"], e["code"], e["attempt"], e["traceback"], e["node"])
            for e in task.errors] == [("lost", "ListenerLost", "", 1, "trace 1", "host-a_101"),
                                      ("boom", "builtins.ValueError", "42", 2, "trace 2",
                                       "host-a_101")]


def test_the_history_keeps_the_newest_entries(client, r, monkeypatch):
    from django_blueque.core import keys

    monkeypatch.setattr(keys, "ERRORS_KEPT", 3)
    proto = client.protocol
    task_id = client.get_queue("q").enqueue("x", retries=10)
    for attempt in range(1, 6):
        proto.reserve("q", "host-a_101", "tok")
        proto.start("q", task_id, "host-a_101", 42, "tok")
        proto.finish("q", task_id, listener_id="host-a_101", pid=42, token="tok",
                     outcome="failed", value=f"e{attempt}")
    assert [e["message"] for e in client.get_task(task_id).errors] == ["e3", "e4", "e5"]


@pytest.mark.parametrize("garbage", ["not json", "{}", '{"a": 1}', "42", "[1, \"x\"]"])
def test_a_garbled_history_is_started_again_not_a_failed_finish(client, r, garbage):
    proto = client.protocol
    task_id = client.get_queue("q").enqueue("x")
    r.hset(f"blueque_task_{task_id}", "errors", garbage)
    assert client.get_task(task_id).errors == []
    proto.reserve("q", "host-a_101", "tok")
    proto.start("q", task_id, "host-a_101", 42, "tok")
    assert proto.finish("q", task_id, listener_id="host-a_101", pid=42, token="tok",
                        outcome="failed", value="boom") == "failed"
    errors = client.get_task(task_id).errors
    assert errors[-1]["message"] == "boom"
    assert len(errors) == 1  # the garbage entries are not errors


def test_a_task_failed_by_blueque1_reads_as_its_one_error(client, r):
    r.hset("blueque_task_old", mapping={"status": "failed", "queue": "q", "error": "it broke",
                                        "node": "host_1", "updated": "1700000000.5"})
    assert client.get_task("old").errors == [{
        "type": "", "message": "it broke", "code": "", "time": 1700000000.5, "node": "host_1",
        "attempt": None, "traceback": ""}]
