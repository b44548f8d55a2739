"""Issue 13, items 6-11: the admin as a user of Flower or django-rq sees it (cancelled tasks,
live data, listeners shown once, what a retry did, throughput, permissions)."""

import re
import time

from .helpers import as_json, body, fail_task, messages_of, run, start_task, url


def test_requeue_listener_needs_the_view_permission_too(client, make_user, blueque):
    client.force_login(make_user("retrier", "retry_tasks"))
    response = client.post(url("listeners/requeue/"), {"queue": "q", "listener": "gone_1"})
    assert response.status_code == 403


def test_a_basic_auth_proxy_header_does_not_hide_the_staff_session(admin):
    headers = {"HTTP_AUTHORIZATION": "Basic dXNlcjpwYXNz"}
    assert admin.get(url("metrics.json"), **headers).status_code == 200
    assert admin.get(url("metrics/"), **headers).status_code == 200
    wrong = admin.get(url("metrics/"), HTTP_AUTHORIZATION="Bearer wrong")
    assert wrong.status_code == 401


def cancel_pending(client, queue):
    task_id = client.get_queue(queue).enqueue('{"n": 1}')
    assert client.cancel(task_id) == "cancelled"
    return task_id


def test_a_cancelled_task_has_a_qualified_type_and_shows_as_cancelled(admin, blueque):
    cancelled = cancel_pending(blueque, "q")
    failed = fail_task(blueque, "q")
    assert blueque.get_task(cancelled).error_type == "django_blueque.Cancelled"
    page = body(admin.get(url(f"tasks/{cancelled}/")))
    assert 'class="blueque-badge blueque-cancelled"' in page
    assert 'class="blueque-badge blueque-cancelled"' not in body(admin.get(url(f"tasks/{failed}/")))
    listing = body(admin.get(url("", name="q", state="failed")))
    assert listing.count("blueque-cancelled") == 1


def test_the_old_unqualified_type_still_reads_as_cancelled(admin, blueque):
    task_id = cancel_pending(blueque, "q")
    blueque.redis.hset(blueque.keys.task(task_id), "error_type", "Cancelled")
    assert "blueque-cancelled" in body(admin.get(url(f"tasks/{task_id}/")))


def test_the_failed_list_filters_cancelled_tasks(admin, blueque):
    cancelled = cancel_pending(blueque, "q")
    failed = fail_task(blueque, "q")
    only = body(admin.get(url("", name="q", state="failed", cancelled="only")))
    assert cancelled in only and failed not in only
    without = body(admin.get(url("", name="q", state="failed", cancelled="no")))
    assert failed in without and cancelled not in without
    assert admin.get(url("", name="q", state="failed", cancelled="x")).status_code == 404


def test_retry_all_failed_leaves_cancelled_tasks_unless_asked(admin, blueque):
    cancelled = cancel_pending(blueque, "q")
    failed = fail_task(blueque, "q")
    confirm = body(admin.post(url("bulk/start/"), {"action": "retry", "state": "failed",
                                                   "queue": "q"}))
    assert "cancelled" in confirm
    admin.post(url("bulk/start/"), {"action": "retry", "state": "failed", "queue": "q",
                                    "confirm": "yes"})
    admin.post(url("bulk/step/"), {"action": "retry", "state": "failed", "queue": "q"})
    assert blueque.get_task(failed).status == "pending"
    assert blueque.get_task(cancelled).status == "failed"
    assert blueque.redis.lrange(blueque.keys.failed("q"), 0, -1) == [cancelled]
    admin.post(url("bulk/start/"), {"action": "retry", "state": "failed", "queue": "q",
                                    "confirm": "yes", "cancelled": "yes"})
    admin.post(url("bulk/step/"), {"action": "retry", "state": "failed", "queue": "q"})
    assert blueque.get_task(cancelled).status == "pending"


def test_a_retried_task_that_failed_again_at_once_is_said_so(admin, blueque, monkeypatch):
    from django_blueque import actions

    task_id = fail_task(blueque, "q")
    blueque.redis.hset(blueque.keys.task(task_id), "retries", "0")  # as @blueque_task writes
    retry = actions.run_task_action

    def retry_then_a_listener_fails_it(*args):
        outcome = retry(*args)
        run(blueque, "q", "failed", "boom again")  # a listener took it at once
        return outcome

    monkeypatch.setattr(actions, "run_task_action", retry_then_a_listener_fails_it)
    response = admin.post(url("actions/"), {"action": "retry", "ids": [task_id],
                                            "confirm": "yes", "next": url(f"tasks/{task_id}/")})
    said = messages_of(response)
    assert "Retried 1 task: it went back to its queue." in said
    assert "1 retried task has already failed again: its error is on its page." in said
    page = body(admin.get(url(f"tasks/{task_id}/")))
    assert "(no automatic retry)" in page


def test_a_listener_on_five_queues_is_shown_once(admin, blueque):
    queues = [f"q{n}" for n in range(5)]
    blueque.protocol.heartbeat("web-1_100", queues, {"host": "web-1", "pid": 100})
    for path in ("", "listeners/"):
        page = body(admin.get(url(path)))
        assert page.count("<code>web-1_100</code>") == 1, path
        assert "q0, q1, q2, q3, q4" in page, path


def test_plurals_of_one(admin, blueque):
    fail_task(blueque, "q")
    page = body(admin.get(url("", name="q", state="failed")))
    assert "(1 task)" in page and "1 tasks" not in page


def test_ends_are_counted_per_queue_and_minute(admin, blueque):
    for _ in range(3):
        fail_task(blueque, "q")
    run_complete = [blueque.get_queue("q").enqueue("{}") for _ in range(2)]
    for _ in run_complete:
        run(blueque, "q", "complete", "{}")
    hour, second = divmod(int(time.time()), 3600)
    counts = blueque.redis.hgetall(blueque.keys.throughput("q", hour))
    errors = {name: counts.pop(name) for name in list(counts) if ":error:" in name}
    assert sum(map(int, errors.values())) == 3  # each failed run, by type (frequent errors)
    assert counts == {f"{second // 60}:failed": "3", f"{second // 60}:complete": "2"} or (
        second % 60 == 0)  # a minute turned over in between
    assert 0 < blueque.redis.ttl(blueque.keys.throughput("q", hour)) <= 7200
    overview = as_json(admin.get(url(""), {"live": "1"}))
    titles = re.findall(r"<title>[^<]*: (\d+) complete, (\d+) failed</title>",
                        overview["charts"]["q"])
    assert len(titles) == 60
    assert sum(int(complete) for complete, _failed in titles) == 2
    assert sum(int(failed) for _complete, failed in titles) == 3
    page = body(admin.get(url("")))
    assert 'data-bq-chart="q"' in page and "2 complete, 3 failed" in page


def test_a_retried_failure_is_not_counted_as_failed(blueque):
    blueque.get_queue("q").enqueue("{}")
    listener, token = "node-1_4242", "token"
    blueque.protocol.heartbeat(listener, ["q"], {"host": "node-1", "pid": 4242})
    task_id = blueque.protocol.reserve("q", listener, token)[0]
    blueque.protocol.start("q", task_id, listener, 1, token)
    assert blueque.protocol.finish("q", task_id, listener_id=listener, pid=1, token=token,
                                   outcome="failed", value="x", policy={"retries": 1}) == "retry"
    hour, second = divmod(int(time.time()), 3600)
    counts = blueque.redis.hgetall(blueque.keys.throughput("q", hour))
    assert not [name for name in counts if name.endswith((":failed", ":complete"))]
    # the failed run counts among the errors of the minute, not among the ends
    assert counts in ({f"{second // 60}:error:": "1"}, {f"{(second - 1) // 60}:error:": "1"})


def test_the_pages_answer_their_live_poll_with_small_json(admin, blueque):
    task_id, token = start_task(blueque, "q")
    blueque.protocol.report_progress(task_id, token, 42.5, "frame 425")
    data = as_json(admin.get(url(f"tasks/{task_id}/"), {"live": "1"}))
    assert data["values"]["progress"] == 42.5
    assert data["text"]["message"] == "frame 425" and data["text"]["percent"] == "42%"
    assert data["text"]["ago created"].endswith("ago")
    version = data["version"]
    blueque.protocol.report_progress(task_id, token, 50, "frame 500")
    assert as_json(admin.get(url(f"tasks/{task_id}/"), {"live": "1"}))["version"] == version
    blueque.protocol.finish("q", task_id, listener_id="node-1_4242", pid=4343, token=token,
                            outcome="complete", value="{}")
    assert as_json(admin.get(url(f"tasks/{task_id}/"), {"live": "1"}))["version"] != version
    for path, query in (("", {}), ("", {"name": "q", "state": "complete"}),
                        ("listeners/", {})):
        response = admin.get(url(path), {**query, "live": "1"})
        assert response.status_code == 200 and len(response.content) < 20_000, path
        page = body(admin.get(url(path), query))
        assert f'data-bq-version="{as_json(response)["version"]}"' in page, path
    assert admin.get(url("tasks/nope/"), {"live": "1"}).status_code == 404


def test_a_finished_task_does_not_say_its_node_is_live(admin, blueque):
    task_id = fail_task(blueque, "q")
    page = body(admin.get(url(f"tasks/{task_id}/")))
    assert "node-1_4242" in page and '<span class="blueque-ok">live</span>' not in page
