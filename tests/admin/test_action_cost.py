"""An operator's action on chosen tasks never makes Redis scan a long list whole: an id is
taken out of its list only near either end (protocol_admin.UNLIST_WINDOW; 100 here), and a task
deeper in a longer list is left alone with a message (cancel flags it instead)."""

import pytest

from django_blueque.core import keys as k
from django_blueque.core import protocol, protocol_admin

from .helpers import fill_failed, messages_of, url

WINDOW = 100


@pytest.fixture(autouse=True)
def small_window(monkeypatch):
    monkeypatch.setattr(protocol_admin, "UNLIST_WINDOW", WINDOW)  # the actions
    monkeypatch.setattr(protocol, "UNLIST_WINDOW", WINDOW)  # enqueue's, and the message


def act(admin, action, ids):
    return admin.post(url("actions/"), {"action": action, "ids": ids, "confirm": "yes",
                                        "next": url("")})


def fill_pending(blueque, queue, count):
    return blueque.get_queue(queue).enqueue_many(["{}"] * count)


@pytest.mark.parametrize("action", ["retry", "delete"])
def test_retry_or_delete_near_either_end_of_a_long_list(admin, blueque, r, action):
    ids = fill_failed(blueque, "q", 1000)  # ids[0] is the oldest: the tail
    response = act(admin, action, [ids[0], ids[-1], ids[500]])
    assert response.status_code == 302
    failed = r.lrange("blueque_failed_tasks_q", 0, -1)
    assert ids[0] not in failed and ids[-1] not in failed
    assert ids[500] in failed and r.hget(f"blueque_task_{ids[500]}", "status") == "failed"
    assert any("more than 100 places from both ends" in text for text in messages_of(response))
    assert r.llen("blueque_failed_tasks_q") == 998


def test_a_short_list_is_searched_whole(admin, blueque, r):
    ids = fill_failed(blueque, "q", 2 * WINDOW)
    act(admin, "retry", [ids[WINDOW]])
    assert r.hget(f"blueque_task_{ids[WINDOW]}", "status") == "pending"
    assert r.llen("blueque_failed_tasks_q") == 2 * WINDOW - 1


def test_cancelling_a_task_deep_in_a_long_pending_list_flags_it(admin, blueque, r):
    ids = fill_pending(blueque, "q", 1000)  # ids[0] is the oldest: taken next
    act(admin, "cancel", [ids[0], ids[500]])
    assert r.hget(f"blueque_task_{ids[0]}", "status") == "failed"
    assert r.hget(f"blueque_task_{ids[500]}", "status") == "pending"
    assert r.hget(f"blueque_task_{ids[500]}", "cancel_requested")
    assert r.llen("blueque_pending_tasks_q") == 999
    # when a listener takes it, it fails without running
    r.ltrim("blueque_pending_tasks_q", 0, -500)  # the 499 older ones were taken meanwhile
    assert r.lindex("blueque_pending_tasks_q", -1) == ids[500]
    task_id = blueque.protocol.reserve("q", "node-1_1", "token")[0]
    assert task_id == ids[500]
    assert blueque.protocol.start("q", task_id, "node-1_1", 42, "token") == -1
    task = blueque.get_task(task_id)
    assert task.status == k.FAILED and task.error == "cancelled"


def test_a_list_of_the_wrong_type_refuses_the_action_and_changes_nothing(admin, blueque, r):
    ids = fill_failed(blueque, "q", 3)
    r.delete("blueque_pending_tasks_q")
    r.set("blueque_pending_tasks_q", "x")
    response = act(admin, "retry", [ids[0]])
    assert response.status_code == 409
    assert "blueque_pending_tasks_q" in response.content.decode()
    assert r.hget(f"blueque_task_{ids[0]}", "status") == "failed"
    assert r.llen("blueque_failed_tasks_q") == 3
