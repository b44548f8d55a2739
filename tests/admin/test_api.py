"""The JSON API (issue 14): every call, with the admin's permissions and CSRF rule for sessions
and Bearer tokens for scripts; errors as JSON; lists paged by cursor at the cost of a page."""

import json

import pytest
from django.test import Client as DjangoClient

from .helpers import as_json, url
from .test_error_filter import fail_many
from .test_scale import commands

TOKEN = "a-token-of-more-than-16-chars"


@pytest.fixture
def api(settings, blueque, make_user):
    """A Django test client sending ``TOKEN``, which names the superuser "bot"."""
    make_user("bot", superuser=True)
    settings.BLUEQUE = {**settings.BLUEQUE, "API_TOKENS": {TOKEN: "bot"}}
    return DjangoClient(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


def post(client, path, data, **extra):
    return client.post(url(path), json.dumps(data), content_type="application/json", **extra)


# -- who may call --------------------------------------------------------------------------------

def test_a_wrong_token_and_no_login_are_401_in_json(api, client):
    wrong = DjangoClient(HTTP_AUTHORIZATION="Bearer not-the-token-at-all")
    for response in (wrong.get(url("api/queues/")), client.get(url("api/queues/"))):
        assert response.status_code == 401
        assert response["Content-Type"] == "application/json"
        assert "error" in as_json(response)
    assert wrong.get(url("api/queues/"))["WWW-Authenticate"] == 'Bearer realm="blueque"'


def test_a_token_of_an_inactive_user_is_refused(api, settings):
    from django.contrib.auth.models import User

    User.objects.filter(username="bot").update(is_active=False)
    assert api.get(url("api/queues/")).status_code == 401


def test_the_admins_permissions_apply_to_sessions_and_tokens(client, blueque, make_user,
                                                             settings):
    task_id = fail_many(blueque, 1, "builtins.KeyError", "k")[0]
    make_user("viewer", "view_tasks")
    make_user("outsider", staff=True)
    settings.BLUEQUE = {**settings.BLUEQUE, "API_TOKENS": {TOKEN: "viewer"}}
    viewer = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert viewer.get(url("api/counts/", queue="q")).status_code == 200
    refused = post(viewer, "api/actions/", {"action": "retry", "ids": [task_id]})
    assert refused.status_code == 403 and "retry_tasks" in as_json(refused)["error"]
    assert post(viewer, "api/bulk/", {"action": "delete", "state": "failed",
                                      "queue": "q"}).status_code == 403
    assert blueque.get_task(task_id).status == "failed"
    client.force_login(make_user("session-outsider", staff=True))
    assert client.get(url("api/queues/")).status_code == 403
    make_user("not-staff", "view_tasks", staff=False)
    settings.BLUEQUE = {**settings.BLUEQUE, "API_TOKENS": {TOKEN: "not-staff"}}
    assert viewer.get(url("api/queues/")).status_code == 403


def test_a_session_post_needs_the_csrf_token_and_a_token_post_does_not(api, blueque,
                                                                       make_user):
    task_id = fail_many(blueque, 2, "builtins.KeyError", "k")
    session = DjangoClient(enforce_csrf_checks=True)
    session.force_login(make_user("root", superuser=True))
    refused = post(session, "api/actions/", {"action": "retry", "ids": [task_id[0]]})
    # JSON like every other answer of the API, not Django's HTML page (issue 38)
    assert refused.status_code == 403 and refused["Content-Type"] == "application/json"
    assert "CSRF" in as_json(refused)["error"]
    assert blueque.get_task(task_id[0]).status == "failed"
    session.get(url(""))  # the admin page sets the CSRF cookie
    token = session.cookies["csrftoken"].value
    allowed = post(session, "api/actions/", {"action": "retry", "ids": [task_id[0]]},
                   HTTP_X_CSRFTOKEN=token)
    assert allowed.status_code == 200 and as_json(allowed)["done"] == [task_id[0]]
    scripted = DjangoClient(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    done = post(scripted, "api/actions/", {"action": "retry", "ids": [task_id[1]]})
    assert done.status_code == 200 and as_json(done)["done"] == [task_id[1]]


def test_the_wrong_method_is_a_405(api):
    assert api.post(url("api/tasks/"), {}).status_code == 405
    assert api.get(url("api/actions/")).status_code == 405


# -- reading -------------------------------------------------------------------------------------

def test_queues_and_counts_by_state_and_error_type(api, blueque):
    fail_many(blueque, 3, "builtins.ValueError", "v")
    fail_many(blueque, 1, "builtins.KeyError", "k")
    blueque.get_queue("q").enqueue("waiting")
    listing = as_json(api.get(url("api/queues/")))
    q, = [queue for queue in listing["queues"] if queue["name"] == "q"]
    assert q["counts"]["failed"] == 4 and q["counts"]["pending"] == 1
    counted = as_json(api.get(url("api/counts/", queue="q", error_type="builtins.KeyError")))
    assert counted["counts"]["failed"] == 4
    assert counted["error_types"] == {"builtins.ValueError": 3, "builtins.KeyError": 1}
    assert counted["error_type"] == {"name": "builtins.KeyError", "failed": 1}
    assert api.get(url("api/counts/", queue="nobody")).status_code == 404
    assert api.get(url("api/counts/")).status_code == 400


def test_tasks_are_paged_newest_first_by_a_cursor_that_new_tasks_do_not_move(api, blueque):
    ids = fail_many(blueque, 7, "builtins.ValueError", "v")
    first = as_json(api.get(url("api/tasks/", queue="q", state="failed", limit=3)))
    assert [row["id"] for row in first["tasks"]] == ids[::-1][:3]
    assert first["total"] == 7 and first["tasks"][0]["status"] == "failed"
    newer = fail_many(blueque, 2, "builtins.ValueError", "new")  # arrive meanwhile
    second = as_json(api.get(url("api/tasks/", queue="q", state="failed", limit=3,
                                 cursor=first["next"])))
    assert [row["id"] for row in second["tasks"]] == ids[::-1][3:6]
    third = as_json(api.get(url("api/tasks/", queue="q", state="failed", limit=3,
                                cursor=second["next"])))
    assert [row["id"] for row in third["tasks"]] == [ids[0]] and third["next"] is None
    again = as_json(api.get(url("api/tasks/", queue="q", state="failed", limit=2)))
    assert [row["id"] for row in again["tasks"]] == newer[::-1]


def test_the_failed_tasks_of_one_error_type(api, blueque):
    keys = fail_many(blueque, 3, "builtins.KeyError", "k")
    fail_many(blueque, 5, "builtins.ValueError", "v")
    answer = as_json(api.get(url("api/tasks/", queue="q", state="failed",
                                 error_type="builtins.KeyError", limit=2)))
    assert [row["id"] for row in answer["tasks"]] == keys[::-1][:2]
    assert answer["total"] == 3 and all(row["error_type"] == "builtins.KeyError"
                                        for row in answer["tasks"])
    rest = as_json(api.get(url("api/tasks/", queue="q", state="failed",
                               error_type="builtins.KeyError", cursor=answer["next"])))
    assert [row["id"] for row in rest["tasks"]] == [keys[0]] and rest["next"] is None


def test_pending_and_scheduled_tasks_are_paged_too(api, blueque):
    queue = blueque.get_queue("q")
    pending = [queue.enqueue(f"p{n}") for n in range(5)]
    first = as_json(api.get(url("api/tasks/", queue="q", state="pending", limit=2)))
    assert [row["id"] for row in first["tasks"]] == pending[::-1][:2]
    rest, cursor = [], first["next"]
    while cursor:
        page = as_json(api.get(url("api/tasks/", queue="q", state="pending", limit=2,
                                   cursor=cursor)))
        rest += [row["id"] for row in page["tasks"]]
        cursor = page["next"]
    assert rest == pending[::-1][2:]
    later = queue.schedule("s", 2**31)
    scheduled = as_json(api.get(url("api/tasks/", queue="q", state="scheduled")))
    assert scheduled["tasks"][0]["id"] == later and scheduled["tasks"][0]["score"] == 2**31


@pytest.mark.parametrize("query", [
    {"queue": "q", "state": "nope"},
    {"queue": "q", "state": "pending", "error_type": "x"},
    {"queue": "q", "state": "failed", "cursor": "p2"},
    {"queue": "q", "state": "pending", "cursor": "t2"},
    {"queue": "q", "state": "failed", "cursor": "t-1"},
    {"queue": "q", "state": "failed", "limit": "0"},
    {"queue": "q", "state": "failed", "limit": "501"},
    {"state": "failed"},
])
def test_a_malformed_parameter_is_a_400_in_json(api, blueque, query):
    fail_many(blueque, 1, "builtins.KeyError", "k")
    response = api.get(url("api/tasks/", **query))
    assert response.status_code == 400 and as_json(response)["error"]


def test_one_task_with_its_error_history(api, blueque):
    task_id = fail_many(blueque, 1, "builtins.KeyError", "k")[0]
    answer = as_json(api.get(url(f"api/tasks/{task_id}/")))
    assert answer["id"] == task_id and answer["fields"]["status"] == "failed"
    assert [(error["type"], error["message"]) for error in answer["errors"]] == [
        ("builtins.KeyError", "k broke")]
    assert api.get(url("api/tasks/no-such-task/")).status_code == 404
    assert as_json(api.get(url("api/tasks/no-such-task/")))["error"]


def test_a_list_costs_what_it_returns(api, blueque, r):
    fail_many(blueque, 50, "builtins.ValueError", "v")
    path = url("api/tasks/", queue="q", state="failed", limit=10)
    api.get(path)
    small = commands(api, r, path)
    fail_many(blueque, 1500, "builtins.ValueError", "more")
    assert commands(api, r, path) == small
    assert small["hmget"] == 10


# -- changing ------------------------------------------------------------------------------------

def test_actions_by_id_say_what_was_done_and_what_was_left(api, blueque):
    failed = fail_many(blueque, 2, "builtins.KeyError", "k")
    waiting = blueque.get_queue("q").enqueue("w")
    retried = as_json(post(api, "api/actions/", {"action": "retry",
                                                 "ids": [failed[0], waiting, "gone"]}))
    assert retried == {"action": "retry", "done": [failed[0]],
                       "skipped": [waiting, "gone"], "too_deep": []}
    cancelled = as_json(post(api, "api/actions/", {"action": "cancel", "ids": [waiting]}))
    assert cancelled["done"] == [waiting]
    assert blueque.get_task(waiting).error_type == "django_blueque.Cancelled"
    deleted = as_json(post(api, "api/actions/", {"action": "delete", "ids": [failed[1]]}))
    assert deleted["done"] == [failed[1]] and not blueque.get_task(failed[1]).exists
    for bad in ({"action": "explode", "ids": [waiting]}, {"action": "retry", "ids": []},
                {"action": "retry", "ids": "x"}, {"action": "retry", "ids": ["a b"]}):
        assert post(api, "api/actions/", bad).status_code == 400
    assert api.post(url("api/actions/"), "not json",
                    content_type="application/json").status_code == 400


def test_a_bulk_job_by_predicate_starts_once_and_is_followed(api, blueque):
    fail_many(blueque, 30, "builtins.KeyError", "k")
    started = post(api, "api/bulk/", {"action": "retry", "state": "failed", "queue": "q"})
    assert started.status_code == 201 and as_json(started)["total"] == 30
    again = post(api, "api/bulk/", {"action": "retry", "state": "failed", "queue": "q"})
    assert again.status_code == 409
    from django_blueque.core import bulk

    bulk.advance_jobs(blueque, budget=5)  # what the reaper's loop does
    progress = as_json(api.get(url("api/bulk/", action="retry", state="failed", queue="q")))
    assert (progress["status"], progress["affected"]) == ("done", 30)
    assert blueque.redis.llen("blueque_pending_tasks_q") == 30
    assert api.get(url("api/bulk/", action="delete", state="complete",
                       queue="q")).status_code == 404
    assert post(api, "api/bulk/", {"action": "cancel", "state": "failed",
                                   "queue": "q"}).status_code == 400


def test_cancel_by_predicate_every_pending_task_of_a_queue(api, blueque, make_user, settings):
    queue = blueque.get_queue("q")
    waiting = [queue.enqueue(f"w{n}", priority=n % 2) for n in range(12)]
    make_user("retrier", "view_tasks", "retry_tasks")
    settings.BLUEQUE = {**settings.BLUEQUE, "API_TOKENS": {TOKEN: "retrier"}}
    body = {"action": "cancel", "state": "pending", "queue": "q"}
    assert post(api, "api/bulk/", body).status_code == 403  # cancel_tasks is needed
    settings.BLUEQUE = {**settings.BLUEQUE, "API_TOKENS": {TOKEN: "bot"}}
    started = post(api, "api/bulk/", body)
    assert started.status_code == 201 and as_json(started)["total"] == 12
    from django_blueque.core import bulk

    bulk.advance_jobs(blueque, budget=5)
    progress = as_json(api.get(url("api/bulk/", action="cancel", state="pending", queue="q")))
    assert (progress["status"], progress["affected"]) == ("done", 12)
    assert {blueque.get_task(task_id).error_type for task_id in waiting} == {
        "django_blueque.Cancelled"}


def test_redis_unreachable_is_a_503_in_json(api, settings):
    settings.BLUEQUE = {**settings.BLUEQUE, "URL": "redis://127.0.0.1:1/0"}
    response = api.get(url("api/queues/"))
    assert response.status_code == 503 and "Redis unreachable" in as_json(response)["error"]
