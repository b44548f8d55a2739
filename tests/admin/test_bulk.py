"""Bulk actions on a whole list: batched, resumable, with progress, and blind to the tasks that
arrive meanwhile."""

import json
import logging
import time

import pytest

from django_blueque.core import bulk
from django_blueque.core.bulk import bulk_job_id

from .helpers import as_json, body, fail_task, fill_failed, messages_of, url


def start(client, action, state="failed", queue="q"):
    return client.post(url("bulk/start/"), {"action": action, "state": state, "queue": queue,
                                            "confirm": "yes"})


def step(client, action, state="failed", queue="q"):
    return client.post(url("bulk/step/"), {"action": action, "state": state, "queue": queue},
                       HTTP_ACCEPT="application/json")


def run_to_end(client, action, state="failed", queue="q", most=1000):
    for _ in range(most):
        job = as_json(step(client, action, state, queue))
        if job["status"] != "running":
            return job
    raise AssertionError("the job did not end")


def test_delete_all_asks_then_runs_in_the_background(admin, blueque, r, caplog):
    caplog.set_level(logging.INFO, logger="django_blueque.admin")
    ids = fill_failed(blueque, "q", 1200)
    confirm = admin.post(url("bulk/start/"), {"action": "delete", "state": "failed",
                                              "queue": "q"})
    assert "1200 tasks now" in body(confirm) and r.llen("blueque_failed_tasks_q") == 1200
    response = start(admin, "delete")
    assert response.status_code == 302
    assert response["Location"] == url("bulk/", action="delete", state="failed", queue="q")
    page = admin.get(response["Location"])
    assert page.status_code == 200 and f'data-bq-step-url="{url("bulk/step/")}"' in body(page)
    job = run_to_end(admin, "delete")
    assert job == dict(job, status="done", total=1200, processed=1200, affected=1200,
                       percent=100.0, user="root")
    assert r.llen("blueque_failed_tasks_q") == 0
    assert not any(r.exists(f"blueque_task_{task_id}") for task_id in ids[:50])
    assert "root: started bulk job: delete every failed task of queue q" in caplog.text
    assert "done" in body(admin.get(response["Location"]))


def test_tasks_arriving_meanwhile_are_left_alone(admin, blueque, r):
    fill_failed(blueque, "q", 700)
    start(admin, "retry")
    as_json(step(admin, "retry"))
    newcomers = fill_failed(blueque, "q", 3, started=time.time(), prefix="new")
    job = run_to_end(admin, "retry")
    assert job["processed"] == 700 and job["affected"] == 700
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == newcomers[::-1]
    assert r.llen("blueque_pending_tasks_q") == 700
    assert blueque.get_task("q-task-0").status == "pending"
    assert blueque.get_task("q-task-0").last_error == "boom"


def test_retry_all_keeps_the_failure_order(admin, blueque, r):
    ids = fill_failed(blueque, "q", 5)
    start(admin, "retry")
    run_to_end(admin, "retry")
    # oldest failed first in, so first out: the queue is taken from its tail
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == ids[::-1]


def test_the_newest_task_gone_meanwhile_the_job_stops_at_newer_tasks(admin, blueque, r):
    ids = fill_failed(blueque, "q", 10)
    start(admin, "delete")
    blueque.protocol.admin.delete("q", ids[-1], "failed")  # someone deletes the job's newest task
    time.sleep(0.01)
    newcomers = fill_failed(blueque, "q", 2, started=time.time(), prefix="new")
    job = run_to_end(admin, "delete")
    assert job["processed"] == 9
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == newcomers[::-1]


def test_complete_lists_too(admin, blueque, r):
    for _ in range(3):
        blueque.get_queue("q").enqueue("{}")
        from .helpers import run

        run(blueque, "q", "complete", "ok")
    start(admin, "delete", state="complete")
    assert run_to_end(admin, "delete", state="complete")["affected"] == 3
    assert r.llen("blueque_complete_tasks_q") == 0


def test_a_step_request_stays_well_under_a_second(admin, blueque, r):
    fill_failed(blueque, "q", 30000)
    start(admin, "delete")
    began = time.monotonic()
    job = as_json(step(admin, "delete"))
    assert time.monotonic() - began < 0.8
    assert job["processed"] > 0


def test_an_interrupted_job_resumes_from_any_process(admin, blueque, r):
    fill_failed(blueque, "q", 2000)
    start(admin, "delete")
    first = blueque.protocol.admin.bulk_step(bulk_job_id("delete", "failed", "q"), "q", "failed",
                                       300, 60)
    assert first == ("running", 300, 2000, 300)
    # the page was closed; the reaper's loop carries on where the job stopped
    while bulk.advance_jobs(blueque, budget=0.05):
        pass
    job = admin.get(url("bulk/", action="delete", state="failed", queue="q")).context["job"]
    assert (job.status, job.processed, job.affected) == ("done", 2000, 2000)
    assert r.llen("blueque_failed_tasks_q") == 0


def test_stray_ids_are_dropped_not_counted(admin, blueque, r):
    fill_failed(blueque, "q", 3)
    r.lpush("blueque_failed_tasks_q", "no-such-task")
    r.rpush("blueque_failed_tasks_q", "another-ghost")
    start(admin, "retry")
    job = run_to_end(admin, "retry")
    assert (job["processed"], job["affected"]) == (5, 3)
    assert r.llen("blueque_failed_tasks_q") == 0


def test_starting_a_running_job_again_shows_it(admin, blueque):
    fill_failed(blueque, "q", 1000)
    start(admin, "delete")
    blueque.protocol.admin.bulk_step(bulk_job_id("delete", "failed", "q"), "q", "failed", 100, 60)
    response = start(admin, "delete")
    assert messages_of(response) == ["This job was already running: here is its progress."]
    job = admin.get(response["Location"]).context["job"]
    assert (job.processed, job.total) == (100, 1000)


def test_stop_a_job(admin, blueque, r):
    fill_failed(blueque, "q", 1000)
    start(admin, "delete")
    data = {"action": "delete", "state": "failed", "queue": "q"}
    response = admin.post(url("bulk/stop/"), data)
    assert messages_of(response) == ["The job is stopped; what it did stays done."]
    assert as_json(step(admin, "delete"))["status"] == "stopped"
    assert r.llen("blueque_failed_tasks_q") == 1000
    assert messages_of(admin.post(url("bulk/stop/"), data)) == ["The job was not running."]
    assert r.ttl("blueque_bulk_delete_failed_q") > 0


def test_an_empty_list_is_done_at_once(admin, blueque):
    fail_task(blueque, "other")
    response = start(admin, "delete")
    job = admin.get(response["Location"]).context["job"]
    assert (job.status, job.total) == ("done", 0)


def test_the_job_page_shows_progress_and_the_dashboard_links_it(admin, blueque):
    fill_failed(blueque, "q", 1000)
    start(admin, "retry")
    blueque.protocol.admin.bulk_step(bulk_job_id("retry", "failed", "q"), "q", "failed", 250, 60)
    page = body(admin.get(url("bulk/", action="retry", state="failed", queue="q")))
    assert '<progress max="100" value="25.0"' in page and "250" in page
    dashboard = body(admin.get(url("")))
    assert "bulk 25%" in dashboard
    listing = body(admin.get(url("", name="q", state="failed")))
    assert "A bulk job (retry) is running on this list: 250 of 1000 done." in listing


def test_a_step_without_json_goes_back_to_the_job_page(admin, blueque):
    fill_failed(blueque, "q", 10)
    start(admin, "delete")
    response = admin.post(url("bulk/step/"), {"action": "delete", "state": "failed",
                                              "queue": "q"})
    assert response.status_code == 302 and response["Location"].startswith(url("bulk/"))


@pytest.mark.parametrize("who", ["viewer", "retrier"])
def test_bulk_delete_needs_the_delete_permission(client, make_user, blueque, who):
    fill_failed(blueque, "q", 10)
    codenames = ["view_tasks"] + (["retry_tasks"] if who == "retrier" else [])
    client.force_login(make_user(who, *codenames))
    assert start(client, "delete").status_code == 403
    assert step(client, "delete").status_code == 403
    assert (start(client, "retry").status_code == 302) == (who == "retrier")


def test_job_record_is_json_friendly(admin, blueque):
    fill_failed(blueque, "q", 3)
    start(admin, "delete")
    job = run_to_end(admin, "delete")
    assert json.loads(json.dumps(job))["finished"] >= job["started"]


def test_cancel_all_pending_from_the_pending_page(admin, blueque, r, make_user, client):
    queue = blueque.get_queue("q")
    ids = [queue.enqueue(f"w{n}", priority=(5 if n % 3 == 0 else None)) for n in range(9)]
    page = body(admin.get(url("", name="q", state="pending")))
    assert "Cancel all 9 pending tasks…" in page
    confirm = admin.post(url("bulk/start/"), {"action": "cancel", "state": "pending",
                                              "queue": "q"})
    assert "9 tasks now" in body(confirm) and "Yes, I’m sure" in body(confirm)
    assert start(admin, "cancel", "pending").status_code == 302
    job = run_to_end(admin, "cancel", "pending")
    assert (job["status"], job["total"], job["affected"]) == ("done", 9, 9)
    assert {blueque.get_task(task_id).status for task_id in ids} == {"failed"}
    assert r.llen("blueque_failed_tasks_q") == 9
    client.force_login(make_user("retrier", "view_tasks", "retry_tasks"))
    queue.enqueue("another")
    assert "Cancel all" not in body(client.get(url("", name="q", state="pending")))
    assert start(client, "cancel", "pending").status_code == 403
