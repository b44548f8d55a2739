"""Every page, read by a superuser: what it shows of what is in Redis."""

import json
import time

from django_blueque.core import keys as k
from django_blueque.core.timings import DEFAULT as TIMINGS

from .helpers import as_json, body, complete_task, enqueue_v1, fail_task, start_task, url


def test_admin_index_has_a_blueque_entry_leading_to_the_dashboard(admin):
    index = body(admin.get("/admin/"))
    assert "Queues and tasks" in index
    assert "/admin/django_blueque/queue/" in index
    response = admin.get("/admin/django_blueque/queue/")  # the demo's URL as a real install's
    assert response.status_code == 200 and "overview" in response.context
    queue = admin.get("/admin/django_blueque/queue/?name=demo.long")  # a queue: ?name= on it
    assert queue.status_code == 200 and queue.context["queue"] == "demo.long"


def test_dashboard_shows_every_queue_with_counts_listeners_and_tasks(admin, blueque, r):
    now = time.time()
    enqueue_v1(r, "legacy.q", "raw text", "v1-task-1", created=now - 90)  # a 1.0 producer
    blueque.protocol.add_listener_v1("oldhost_555", "legacy.q")
    fail_task(blueque, "video")
    fail_task(blueque, "video")
    complete_task(blueque, "video")
    start_task(blueque, "video", listener="web-1_100")
    blueque.get_queue("video").schedule("{}", now + 3600)
    blueque.protocol.heartbeat("dead-1_7", ["video"], {"host": "dead-1", "pid": 7}, ttl=-30)
    # told to stop: it finishes its running tasks and takes none
    blueque.protocol.heartbeat("stopping-1_9", ["video"], {"host": "stopping-1", "pid": 9,
                                                           "stopping": 1})
    # an idle listener that beat 100 s ago, on its long lease
    blueque.protocol.heartbeat("idle-1_8", ["video"], {"host": "idle-1", "pid": 8,
                                                       "lease": TIMINGS.idle_heartbeat},
                               ttl=TIMINGS.idle_heartbeat - 100)
    response = admin.get(url(""))
    assert response.status_code == 200
    overview = response.context["overview"]
    queues = {queue.name: queue for queue in overview.queues}
    assert {"legacy.q", "video", "demo.long", "demo.tick"} <= set(queues)
    assert queues["video"].counts == {"scheduled": 1, "pending": 0, "reserved": 0,
                                      "started": 1, "complete": 1, "failed": 2}
    assert queues["legacy.q"].counts["pending"] == 1
    assert 85 < queues["legacy.q"].oldest_pending_age < 120
    assert queues["video"].oldest_pending_age is None
    assert [listener.id for listener in queues["video"].live] == ["idle-1_8", "node-1_4242",
                                                                  "stopping-1_9", "web-1_100"]
    assert [listener.id for listener in queues["video"].live if listener.stopping] == [
        "stopping-1_9"]
    assert [listener.id for listener in queues["video"].stale] == ["dead-1_7"]
    assert [listener.id for listener in queues["legacy.q"].v1] == ["oldhost_555"]
    web = next(listener for listener in queues["video"].live if listener.id == "web-1_100")
    assert web.held == 1 and web.host == "node-1" and web.heartbeat_age < 5
    idle = next(listener for listener in queues["video"].live if listener.id == "idle-1_8")
    assert 95 < idle.heartbeat_age < 110
    assert queues["demo.long"].task == "demo.tasks.long_task"
    assert queues["legacy.q"].task is None
    page = body(response)
    assert "demo.tasks.long_task" in page and "legacy.q" in page
    assert "stale: heartbeat expired" in page and "blueque 1.0 (no heartbeat)" in page
    assert page.count("stopping: finishing its tasks, taking none") == 1
    assert [run["name"] for run in overview.periodic] == ["demo.tasks.tick"]
    assert overview.periodic[0]["next"] > time.time()


def test_queue_page_lists_a_state_newest_first_in_pages(admin, blueque):
    ids = [fail_task(blueque, "q", parameters=json.dumps({"n": n})) for n in range(30)]
    response = admin.get(url("", name="q", state="failed", per_page=25))
    assert response.status_code == 200
    assert [task.id for task in response.context["tasks"]] == ids[::-1][:25]
    assert response.context["total"] == 30 and response.context["pages"] == 2
    second = admin.get(url("", name="q", state="failed", per_page=25, p=2))
    assert [task.id for task in second.context["tasks"]] == ids[::-1][25:]
    page = body(response)
    for column in ("Created", "Updated", "Node", "PID", "Attempts", "Parameters", "Error"):
        assert column in page
    assert "node-1_4242" in page and "{&quot;n&quot;: 29}" in page and "boom" in page
    assert "page 2 of 2" in body(second).lower()


def test_queue_page_beyond_the_last_page_shows_the_last_one(admin, blueque):
    fail_task(blueque, "q")
    response = admin.get(url("", name="q", state="failed", p=50))
    assert response.status_code == 200 and response.context["page"] == 1


def test_queue_page_previews_long_parameters(admin, blueque):
    long_text = "é" * 5000
    blueque.get_queue("q").enqueue(long_text)
    task = admin.get(url("", name="q", state="pending")).context["tasks"][0]
    assert task.parameters.endswith("…") and len(task.parameters) < 200
    assert task.parameters[:-1] == "é" * (len(task.parameters) - 1)


def test_scheduled_page_is_by_eta_latest_first(admin, blueque):
    queue = blueque.get_queue("q")
    soon = queue.schedule("soon", time.time() + 60)
    later = queue.schedule("later", time.time() + 600)
    tasks = admin.get(url("", name="q", state="scheduled")).context["tasks"]
    assert [task.id for task in tasks] == [later, soon]
    assert tasks[0].score > tasks[1].score


def test_pending_page_and_a_queue_written_by_blueque_1(admin, r, blueque):
    enqueue_v1(r, "legacy.q", "plain <b>text</b>", "v1-a")
    enqueue_v1(r, "legacy.q", "more", "v1-b")
    response = admin.get(url("", name="legacy.q", state="pending"))
    assert [task.id for task in response.context["tasks"]] == ["v1-b", "v1-a"]
    assert "plain &lt;b&gt;text&lt;/b&gt;" in body(response)


def test_pending_page_shows_tasks_with_a_priority_in_the_order_they_will_run(admin, blueque):
    """Newest first, as every list: the reverse of the order a listener takes them."""
    queue = blueque.get_queue("q")
    priorities = [None, 5, -5, None, 50, -1, 5] * 9
    ids = [queue.enqueue(str(n), priority=priority) for n, priority in enumerate(priorities)]
    # higher priority first, then in order of arrival (a stable sort keeps that order)
    taken = [ids[n] for n in sorted(range(len(ids)), key=lambda n: -(priorities[n] or 0))]
    response = admin.get(url("", name="q", state="pending", per_page=25))
    assert response.context["counts"]["pending"] == 63 and response.context["pages"] == 3
    shown = [task.id for page in (1, 2, 3) for task in admin.get(
        url("", name="q", state="pending", per_page=25, p=page)).context["tasks"]]
    assert shown == taken[::-1]
    assert "priority 50" in body(admin.get(url("", name="q", state="pending", p=3)))
    dashboard = {row.name: row for row in admin.get(url("")).context["overview"].queues}
    assert dashboard["q"].counts["pending"] == 63


def test_started_and_reserved_pages_read_the_listeners(admin, blueque):
    running, _ = start_task(blueque, "q", listener="a-host_1", pid=11)
    other, _ = start_task(blueque, "q", listener="b-host_2", pid=22)
    blueque.get_queue("q").enqueue("{}")
    waiting = blueque.protocol.reserve("q", "b-host_2", "tok")[0]
    started = admin.get(url("", name="q", state="started"))
    assert {task.id for task in started.context["tasks"]} == {running, other}
    assert started.context["counts"]["started"] == 2
    assert started.context["counts"]["reserved"] == 1
    reserved = admin.get(url("", name="q", state="reserved", per_page=25))
    assert [(task.id, task.status) for task in reserved.context["tasks"]] == [
        (running, "started"), (waiting, "reserved"), (other, "started")]
    assert reserved.context["total"] == 3


def test_reserved_page_pages_across_listeners(admin, blueque):
    queue = blueque.get_queue("q")
    queue.enqueue_many(["{}"] * 40)
    for listener in ("a_1", "b_2"):
        blueque.protocol.heartbeat(listener, ["q"])
        for _ in range(20):
            blueque.protocol.reserve("q", listener, "tok")
    first = admin.get(url("", name="q", state="reserved", per_page=25))
    second = admin.get(url("", name="q", state="reserved", per_page=25, p=2))
    ids = [task.id for task in first.context["tasks"] + second.context["tasks"]]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert first.context["counts"]["reserved"] == 40


def test_task_page_shows_every_field(admin, blueque, r):
    task_id = fail_task(blueque, "q", parameters='{"video": 42, "tags": ["a", "b"]}',
                        error="it broke", traceback="Traceback (most recent call last):\n"
                        "  File \"x.py\", line 1\nRuntimeError: it broke\n")
    r.hset(f"blueque_task_{task_id}", "custom_field", "from a newer producer")
    response = admin.get(url(f"tasks/{task_id}/"))
    assert response.status_code == 200
    page = body(response)
    assert '{\n  &quot;video&quot;: 42,\n  &quot;tags&quot;: [\n    &quot;a&quot;' in page
    assert "RuntimeError: it broke" in page and "it broke" in page
    for name in r.hgetall(f"blueque_task_{task_id}"):
        assert f"<code>{name}</code>" in page
    assert "from a newer producer" in page
    labels = [str(event["label"]) for event in response.context["timeline"]]
    assert labels[0] == "created"
    # and the failed run, from the task's error history
    assert set(labels) == {"created", "started (last run)", "last update", "finished",
                           "run 1 failed: builtins.RuntimeError: it broke"}


def test_task_page_shows_each_failed_run_and_the_unique_key(admin, blueque, r):
    proto = blueque.protocol
    task_id = blueque.get_queue("q").enqueue("x", retries=1, unique_key="video-42",
                                             unique_until="end")
    for attempt, code in ((1, "E1"), (2, "")):
        proto.reserve("q", "node-1_4242", "tok")
        proto.start("q", task_id, "node-1_4242", 4343, "tok")
        proto.finish("q", task_id, listener_id="node-1_4242", pid=4343, token="tok",
                     outcome="failed", value=f"run {attempt} broke",
                     error_type="builtins.ValueError", error_code=code)
    response = admin.get(url(f"tasks/{task_id}/"))
    labels = [str(event["label"]) for event in response.context["timeline"]]
    failures = [label for label in labels if "failed" in label]
    assert failures == ["run 1 failed: builtins.ValueError: run 1 broke (code E1)",
                        "run 2 failed: builtins.ValueError: run 2 broke"]
    page = body(response)
    assert "<code>unique_key</code>" in page and "video-42" in page
    assert "<code>errors</code>" in page and "2 failed runs, on the timeline" in page


def test_task_page_shows_text_parameters_verbatim_and_the_result(admin, blueque):
    task_id = complete_task(blueque, "q", parameters="not json {", result='{"frames": 7}')
    page = body(admin.get(url(f"tasks/{task_id}/")))
    assert "not json {" in page
    assert '{\n  &quot;frames&quot;: 7\n}' in page


def test_task_page_of_a_running_task_has_a_progress_bar_and_follows_it(admin, blueque):
    task_id, token = start_task(blueque, "q")
    blueque.protocol.report_progress(task_id, token, 42.5, "frame 425 of 1000")
    response = admin.get(url(f"tasks/{task_id}/"))
    page = body(response)
    assert '<progress max="100" value="42.5"' in page and "frame 425 of 1000" in page
    assert f'data-bq-live-url="/admin/django_blueque/queue/tasks/{task_id}/?live=1"' in page
    assert "held (renewed" in page
    progress = as_json(admin.get(url(f"tasks/{task_id}/progress/")))
    assert progress["status"] == "started" and progress["progress"] == 42.5
    assert progress["message"] == "frame 425 of 1000"


def test_listeners_page_shows_each_listener_and_its_tasks(admin, blueque):
    running, token = start_task(blueque, "q", listener="web-1_100", pid=4321)
    blueque.protocol.report_progress(running, token, 10, "warming up")
    blueque.get_queue("q").enqueue("{}")
    waiting = blueque.protocol.reserve("q", "web-1_100", "tok")[0]
    blueque.protocol.add_listener_v1("old_9", "q")
    response = admin.get(url("listeners/"))
    found = {listener.id: listener for listener in response.context["listeners"]}
    web = found["web-1_100"]
    assert web.kind == "live" and web.held == 2 and web.host == "node-1"
    assert [task.id for task in web.running] == [running]
    assert [task.id for task in web.reserved] == [waiting]
    assert found["old_9"].kind == "v1"
    page = body(response)
    assert running in page and waiting in page and "warming up" in page


def test_find_goes_to_the_task(admin, blueque):
    task_id = fail_task(blueque, "q")
    response = admin.get(url("find/", id=f"  {task_id} "))
    assert response.status_code == 302 and response["Location"] == url(f"tasks/{task_id}/")


def test_find_form_is_on_every_page(admin, blueque):
    task_id = fail_task(blueque, "q")
    for path in ("", "listeners/", f"tasks/{task_id}/"):
        assert 'action="/admin/django_blueque/queue/find/"' in body(admin.get(url(path)))
    assert 'action="/admin/django_blueque/queue/find/"' in body(admin.get(url("", name="q"),
                                                             follow=True))


def test_metrics_json_has_the_dashboard_figures(admin, blueque, r):
    enqueue_v1(r, "q", "x", "old-one", created=time.time() - 30)
    fail_task(blueque, "other")
    data = as_json(admin.get(url("metrics.json")))
    queues = {queue["name"]: queue for queue in data["queues"]}
    assert queues["q"]["counts"]["pending"] == 1
    assert 25 < queues["q"]["oldest_pending_age"] < 60
    assert queues["other"]["counts"]["failed"] == 1
    assert queues["other"]["listeners"] == {"live": 1, "stale": 0, "v1": 0}
    assert data["listeners"][0]["id"] == "node-1_4242"
    assert data["periodic"][0]["name"] == "demo.tasks.tick"


def test_the_oldest_pending_age_counts_tasks_with_a_priority(admin, blueque, r):
    """A task with a priority waits in the queue's prioritized set, not its list: its age
    counts, in a queue with only such tasks too (an alert on the metric must see them)."""
    def enqueue(queue, age, priority=None):
        task_id = blueque.get_queue(queue).enqueue("{}", priority=priority)
        r.hset(f"blueque_task_{task_id}", "updated", repr(time.time() - age))
    enqueue("mixed", 40, priority=-5)  # the oldest: a low priority, behind the ones below
    enqueue("mixed", 20, priority=10)
    enqueue("mixed", 10)
    enqueue("only", 30, priority=3)
    enqueue("plain", 15)
    queues = {queue["name"]: queue for queue in as_json(admin.get(url("metrics.json")))["queues"]}
    assert 35 < queues["mixed"]["oldest_pending_age"] < 50
    assert 25 < queues["only"]["oldest_pending_age"] < 40
    assert 10 < queues["plain"]["oldest_pending_age"] < 25
    assert queues["mixed"]["counts"]["pending"] == 3


def test_prometheus_metrics(admin, blueque, r):
    enqueue_v1(r, "q", "x", "old-one", created=time.time() - 30)
    fail_task(blueque, 'we"ird')
    response = admin.get(url("metrics/"))
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body(response)
    assert 'blueque_tasks{queue="q",state="pending"} 1' in text
    assert 'blueque_tasks{queue="we\\"ird",state="failed"} 1' in text
    assert "# TYPE blueque_oldest_pending_age_seconds gauge" in text
    age = next(line for line in text.splitlines()
               if line.startswith('blueque_oldest_pending_age_seconds{queue="q"}'))
    assert 25 < float(age.split()[-1]) < 60
    assert 'blueque_listeners{queue="we\\"ird",state="live"} 1' in text


def test_prometheus_run_time_histograms_per_queue_and_outcome(admin, blueque, r):
    """Issue 41: from the started and finished times of each queue's newest runs."""
    runs = {"video": [(complete_task, 0.5), (complete_task, 40.0), (complete_task, 4000.0),
                      (fail_task, 2.0)],
            "mail": [(complete_task, 0.2)]}
    for queue, made in runs.items():
        for make, seconds in made:
            task_id = make(blueque, queue)
            r.hset(f"blueque_task_{task_id}", mapping={"started": "1000.0",
                                                       "finished": repr(1000.0 + seconds)})
    r.rpush("blueque_complete_tasks_mail", "v1-task")  # blueque 1.0's: no start or finish time
    r.hset("blueque_task_v1-task", mapping={"status": "complete", "queue": "mail"})
    text = body(admin.get(url("metrics/")))
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines()
                   if line.startswith("blueque_recent_run_seconds"))
    bucket = 'blueque_recent_run_seconds_bucket{{queue="{}",outcome="{}",le="{}"}}'
    assert [int(samples[bucket.format("video", "complete", le)])
            for le in ("1.0", "5.0", "60.0", "3600.0", "7200.0", "+Inf")] == [1, 1, 2, 2, 3, 3]
    assert samples[bucket.format("video", "failed", "1.0")] == "0"
    assert samples[bucket.format("video", "failed", "5.0")] == "1"
    assert float(samples['blueque_recent_run_seconds_sum{queue="video",outcome="complete"}']) \
        == 4040.5
    assert samples['blueque_recent_run_seconds_count{queue="mail",outcome="complete"}'] == "1"
    assert not any('queue="mail",outcome="failed"' in name for name in samples)  # no runs
    assert "# TYPE blueque_recent_run_seconds_bucket gauge" in text


def test_pages_of_an_empty_redis(admin, blueque):
    for path in ("", "listeners/", "metrics/", "metrics.json"):
        assert admin.get(url(path)).status_code == 200
    assert admin.get(url("", name="demo.long", state="failed")).status_code == 200


def test_a_redis_outage_is_a_503_page_not_a_500(admin, settings):
    settings.BLUEQUE = {"URL": "redis://127.0.0.1:1/0"}
    response = admin.get(url(""))
    assert response.status_code == 503
    assert "does not answer" in body(response)
    # what a script polls answers in JSON, for a staff session too
    for path in ("metrics.json", "tasks/some-task/progress/"):
        polled = admin.get(url(path))
        assert polled.status_code == 503 and polled["Content-Type"] == "application/json"
        assert "Redis unreachable" in as_json(polled)["error"]


def test_started_tasks_stay_counted_once(admin, blueque):
    start_task(blueque, "q")
    counts = admin.get(url("", name="q", state="started")).context["counts"]
    assert counts[k.STARTED] == 1 and counts[k.RESERVED] == 0
