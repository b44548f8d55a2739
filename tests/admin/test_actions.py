"""Each action: its confirmation step, its effect in Redis (as the protocol has it), its
message and its log line with the user."""

import logging
import time

import pytest

from django_blueque.core import keys as k

from .helpers import body, complete_task, fail_task, messages_of, start_task, url


@pytest.fixture
def admin_log(caplog):
    caplog.set_level(logging.INFO, logger="django_blueque.admin")
    return caplog


def act(client, action, ids, confirm=True, next_url="/admin/django_blueque/queue/listeners/"):
    data = {"action": action, "ids": ids, "next": next_url}
    if confirm:
        data["confirm"] = "yes"
    return client.post(url("actions/"), data)


def logged(caplog):
    return [record.getMessage() for record in caplog.records
            if record.name == "django_blueque.admin"]


def test_an_action_asks_for_confirmation_first(admin, blueque):
    task_id = fail_task(blueque, "q")
    response = act(admin, "retry", [task_id], confirm=False)
    assert response.status_code == 200
    page = body(response)
    assert "Are you sure?" in page and 'name="confirm" value="yes"' in page
    assert f'name="ids" value="{task_id}"' in page and "will be done" in page
    assert blueque.get_task(task_id).status == "failed"


def test_retry_a_failed_task(admin, blueque, admin_log, r):
    task_id = fail_task(blueque, "q")
    other = blueque.get_queue("q").enqueue("{}")
    response = act(admin, "retry", [task_id])
    assert response.status_code == 302 and response["Location"] == url("listeners/")
    task = blueque.get_task(task_id)
    assert task.status == "pending" and task.error is None and task.last_error == "boom"
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == []
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [other, task_id]  # taken next
    assert messages_of(response) == ["Retried 1 task: it went back to its queue."]
    assert logged(admin_log) == [f"root: retry task {task_id} of queue q (was failed)"]


def test_retry_selected_leaves_the_others_alone(admin, blueque):
    failed = [fail_task(blueque, "q") for _ in range(2)]
    done = complete_task(blueque, "q")
    response = act(admin, "retry", failed + [done, "no-such-task"])
    assert [blueque.get_task(task_id).status for task_id in failed] == ["pending", "pending"]
    assert blueque.get_task(done).status == "complete"
    assert messages_of(response) == [
        "Retried 2 tasks: they went back to their queue.",
        "2 tasks were left alone: their status does not allow it (any more)."]


def test_confirmation_says_when_nothing_applies(admin, blueque):
    done = complete_task(blueque, "q")
    page = body(act(admin, "retry", [done], confirm=False))
    assert "None of these tasks can take this action now." in page
    assert 'name="confirm"' not in page


def test_delete_one_and_selected_finished_tasks(admin, blueque, r, admin_log):
    failed = fail_task(blueque, "q")
    done = [complete_task(blueque, "q") for _ in range(2)]
    waiting = blueque.get_queue("q").enqueue("{}")
    response = act(admin, "delete", [failed])
    assert not r.exists(f"blueque_task_{failed}") and r.llen("blueque_failed_tasks_q") == 0
    assert messages_of(response) == ["Deleted 1 task."]
    response = act(admin, "delete", done + [waiting])
    assert r.llen("blueque_complete_tasks_q") == 0
    assert not any(r.exists(f"blueque_task_{task_id}") for task_id in done)
    assert blueque.get_task(waiting).status == "pending"
    assert "Deleted 2 tasks." in messages_of(response)
    assert len(logged(admin_log)) == 3


def test_delete_from_the_task_page_goes_back_to_the_list(admin, blueque):
    failed = fail_task(blueque, "q")
    page = body(admin.get(url(f"tasks/{failed}/")))
    assert 'value="/admin/django_blueque/queue/?name=q&amp;state=failed"' in page
    response = act(admin, "delete", [failed], next_url="/admin/django_blueque/queue/?name=q")
    assert response["Location"] == "/admin/django_blueque/queue/?name=q"


def test_cancel_waiting_tasks(admin, blueque, r):
    pending = blueque.get_queue("q").enqueue("{}")
    scheduled = blueque.get_queue("q").schedule("{}", time.time() + 3600)
    response = act(admin, "cancel", [pending, scheduled])
    for task_id in (pending, scheduled):
        task = blueque.get_task(task_id)
        assert task.status == "failed" and task.error == "cancelled"
    assert r.llen("blueque_pending_tasks_q") == 0 and r.zcard("blueque_scheduled_tasks_q") == 0
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [scheduled, pending]
    assert messages_of(response)[0].startswith("Cancelled 2 tasks")


def test_cancel_a_running_task_asks_its_listener(admin, blueque, r):
    running, _ = start_task(blueque, "q", listener="web-1_100")
    act(admin, "cancel", [running])
    assert blueque.get_task(running).cancel_requested is not None
    assert r.smembers("blueque_cancels_web-1_100") == {running}


def test_run_a_scheduled_task_now(admin, blueque, r, admin_log):
    eta = time.time() + 3600
    task_id = blueque.get_queue("q").schedule("{}", eta)
    first = blueque.get_queue("q").enqueue("{}")
    response = act(admin, "run_now", [task_id])
    assert blueque.get_task(task_id).status == "pending"
    assert r.zcard("blueque_scheduled_tasks_q") == 0
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [first, task_id]
    assert messages_of(response) == ["Sent 1 scheduled task to its queue."]
    assert "run_now" in logged(admin_log)[0]
    assert blueque.protocol.reserve("q", "l_1", "t")[0] == task_id


def test_mark_a_stuck_started_task_failed(admin, blueque, r):
    task_id, _ = start_task(blueque, "q", listener="gone-host_5", pid=55)
    r.hset(f"blueque_task_{task_id}", "retries", "3")
    response = act(admin, "mark_failed", [task_id])
    task = blueque.get_task(task_id)
    assert task.status == "failed" and task.error_type == "MarkedFailed"
    assert task.error == "marked failed by root from the admin"
    assert r.smembers("blueque_started_tasks_q") == set()
    assert r.lrange("blueque_reserved_tasks_q_gone-host_5", 0, -1) == []
    assert not r.exists(f"blueque_lease_{task_id}")
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]
    assert messages_of(response) == ["Marked 1 task failed."]


def test_mark_failed_a_task_started_by_blueque_1(admin, blueque, r):
    blueque.get_queue("q").enqueue("{}")
    task_id = r.rpoplpush("blueque_pending_tasks_q", "blueque_reserved_tasks_q_old_9")
    r.hset(f"blueque_task_{task_id}", mapping={"status": "started", "node": "old_9",
                                               "pid": "77"})
    r.sadd("blueque_started_tasks_q", f"old_9 77 {task_id}")
    act(admin, "mark_failed", [task_id])
    assert blueque.get_task(task_id).status == "failed"
    assert r.scard("blueque_started_tasks_q") == 0


def _stale_listener_with_a_reserved_task(blueque):
    blueque.protocol.heartbeat("dead-1_7", ["q"], {"host": "dead-1", "pid": 7}, ttl=-30)
    task_id = blueque.get_queue("q").enqueue("{}")
    assert blueque.protocol.reserve("q", "dead-1_7", "tok")[0] == task_id
    return task_id


def test_requeue_the_tasks_of_a_dead_listener(admin, blueque, r, admin_log):
    task_id = _stale_listener_with_a_reserved_task(blueque)
    data = {"queue": "q", "listener": "dead-1_7"}
    page = admin.post(url("listeners/requeue/"), data)
    assert page.status_code == 200 and "Are you sure?" in body(page)
    response = admin.post(url("listeners/requeue/"), dict(data, confirm="yes"))
    assert response["Location"] == "/admin/django_blueque/queue/listeners/"
    assert blueque.get_task(task_id).status == "pending"
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]
    assert not r.sismember("blueque_listeners_q", "dead-1_7")
    assert not r.exists("blueque_listener_dead-1_7")
    assert messages_of(response) == [
        "Released listener dead-1_7: 1 task went back to queue q."]
    assert "released listener dead-1_7" in logged(admin_log)[0]
    again = admin.post(url("listeners/requeue/"), dict(data, confirm="yes"))
    assert "nothing to requeue" in messages_of(again)[0]


def test_a_live_listener_cannot_be_released(admin, blueque, r):
    start_task(blueque, "q", listener="web-1_100")
    response = admin.post(url("listeners/requeue/"), {"queue": "q", "listener": "web-1_100",
                                                      "confirm": "yes"})
    assert "is alive" in messages_of(response)[0]
    assert r.sismember("blueque_listeners_q", "web-1_100")


def test_a_blueque_1_listener_can_be_released_with_a_warning(admin, blueque, r):
    blueque.protocol.add_listener_v1("old_9", "q")
    data = {"queue": "q", "listener": "old_9"}
    assert "blueque 1.0 listener" in body(admin.post(url("listeners/requeue/"), data))
    admin.post(url("listeners/requeue/"), dict(data, confirm="yes"))
    assert not r.sismember("blueque_listeners_q", "old_9")
    assert r.zscore("blueque_queues", "q") == 0


def test_the_listeners_page_offers_requeue_for_dead_listeners_only(admin, blueque):
    _stale_listener_with_a_reserved_task(blueque)
    start_task(blueque, "q", listener="web-1_100")
    page = body(admin.get(url("listeners/")))
    assert page.count("Requeue its tasks") == 1


def test_no_selection_says_so(admin, blueque):
    response = admin.post(url("actions/"), {"action": "retry", "confirm": "yes"})
    assert messages_of(response) == ["No task was selected: nothing was done."]


def test_the_list_page_offers_the_actions_of_its_state(admin, blueque):
    fail_task(blueque, "q")
    page = body(admin.get(url("", name="q", state="failed")))
    assert '<option value="retry">Retry</option>' in page
    assert '<option value="delete">Delete</option>' in page
    assert '<option value="cancel">' not in page
    assert "Retry the 1 failed task…" in page and "Delete the 1 failed task…" in page
    blueque.get_queue("q").schedule("{}", time.time() + 60)
    page = body(admin.get(url("", name="q", state=k.SCHEDULED)))
    assert '<option value="run_now">' in page and '<option value="cancel">' in page
    assert "Retry all" not in page
