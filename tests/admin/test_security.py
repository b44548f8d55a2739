"""Who may see and do what; GET changes nothing; untrusted text is escaped; bad input is a
404 (or a 400 for a malformed form), never a 500."""

import pytest
from django.test import Client as DjangoClient

from .helpers import body, fail_task, start_task, url

PAGES = ["", "listeners/", "?name=q&state=failed", "metrics/", "metrics.json"]
POSTS = ["actions/", "listeners/requeue/", "bulk/start/", "bulk/step/", "bulk/stop/"]


@pytest.fixture
def task_id(blueque):
    return fail_task(blueque, "q")


def test_anonymous_users_are_sent_to_the_admin_login(client, blueque, task_id, db):
    for path in PAGES + [f"tasks/{task_id}/", f"tasks/{task_id}/progress/", "bulk/"]:
        response = client.get(f"/admin/django_blueque/queue/{path}")
        assert response.status_code == 302, path
        assert response["Location"].startswith(f"/admin/login/?next={url('')}"), path
    for path in POSTS:
        response = client.post(url(path), {"action": "retry", "ids": [task_id]})
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")
    assert blueque.get_task(task_id).status == "failed"


def test_non_staff_users_get_403(client, make_user, blueque, task_id):
    client.force_login(make_user("visitor", "view_tasks", "retry_tasks", staff=False))
    for path in PAGES + [f"tasks/{task_id}/"]:
        assert client.get(f"/admin/django_blueque/queue/{path}").status_code == 403, path
    response = client.post(url("actions/"), {"action": "retry", "ids": [task_id],
                                             "confirm": "yes"})
    assert response.status_code == 403
    assert blueque.get_task(task_id).status == "failed"


def test_staff_without_the_view_permission_get_403(client, make_user, blueque, task_id):
    client.force_login(make_user("staffer"))
    for path in PAGES + [f"tasks/{task_id}/"]:
        assert client.get(f"/admin/django_blueque/queue/{path}").status_code == 403, path
    assert "Queues and tasks" not in body(client.get("/admin/"))


def test_the_view_permission_shows_pages_but_no_action(client, make_user, blueque, task_id):
    client.force_login(make_user("viewer", "view_tasks"))
    for path in PAGES + [f"tasks/{task_id}/"]:
        assert client.get(f"/admin/django_blueque/queue/{path}").status_code == 200, path
    assert "Queues and tasks" in body(client.get("/admin/"))
    page = body(client.get(url(f"tasks/{task_id}/")))
    assert "action-retry" not in page and "action-delete" not in page
    listing = body(client.get(url("", name="q", state="failed")))
    assert "Retry all" not in listing and 'name="action"' not in listing
    for action in ("retry", "delete", "cancel", "run_now", "mark_failed"):
        response = client.post(url("actions/"), {"action": action, "ids": [task_id]})
        assert response.status_code == 403, action
    for action, state in (("retry", "failed"), ("delete", "failed")):
        response = client.post(url("bulk/start/"), {"action": action, "state": state,
                                                    "queue": "q", "confirm": "yes"})
        assert response.status_code == 403
    assert blueque.get_task(task_id).status == "failed"


@pytest.mark.parametrize(("codename", "allowed", "refused"), [
    ("retry_tasks", ["retry", "run_now"], ["cancel", "mark_failed", "delete"]),
    ("cancel_tasks", ["cancel", "mark_failed"], ["retry", "run_now", "delete"]),
    ("delete_tasks", ["delete"], ["retry", "run_now", "cancel", "mark_failed"]),
])
def test_each_permission_grants_its_kind_of_action(client, make_user, blueque, task_id,
                                                   codename, allowed, refused):
    client.force_login(make_user("operator", "view_tasks", codename))
    for action in allowed:
        response = client.post(url("actions/"), {"action": action, "ids": [task_id]})
        assert response.status_code == 200, action  # the confirmation page
    for action in refused:
        response = client.post(url("actions/"), {"action": action, "ids": [task_id]})
        assert response.status_code == 403, action
    bulk = {"retry_tasks": "retry", "delete_tasks": "delete"}.get(codename)
    for action in ("retry", "delete"):
        response = client.post(url("bulk/start/"), {"action": action, "state": "failed",
                                                    "queue": "q"})
        assert response.status_code == (200 if action == bulk else 403)
    response = client.post(url("listeners/requeue/"), {"queue": "q", "listener": "x_1"})
    assert (response.status_code == 302) == (codename == "retry_tasks")


def test_permissions_granted_through_a_group(client, make_user, blueque, task_id):
    from django.contrib.auth.models import Group, Permission

    group = Group.objects.create(name="operators")
    group.permissions.add(*Permission.objects.filter(codename__in=["view_tasks",
                                                                   "retry_tasks"]))
    user = make_user("member")
    user.groups.add(group)
    client.force_login(user)
    response = client.post(url("actions/"), {"action": "retry", "ids": [task_id],
                                             "confirm": "yes"})
    assert response.status_code == 302
    assert blueque.get_task(task_id).status == "pending"


def test_get_never_changes_anything(admin, blueque, task_id, r):
    before = {key: r.dump(key) for key in r.keys("*")}
    for path in POSTS:
        assert admin.get(url(path), {"action": "retry", "ids": [task_id],
                                     "confirm": "yes"}).status_code == 405
    for path in PAGES + [f"tasks/{task_id}/", f"tasks/{task_id}/progress/"]:
        admin.get(f"/admin/django_blueque/queue/{path}")
    admin.get(url("bulk/", action="retry", state="failed", queue="q"))
    admin.get(url("find/", id=task_id))
    assert {key: r.dump(key) for key in r.keys("*")} == before


def test_actions_need_the_csrf_token(make_user, blueque, task_id):
    client = DjangoClient(enforce_csrf_checks=True)
    client.force_login(make_user("root", superuser=True))
    for path in POSTS:
        response = client.post(url(path), {"action": "retry", "ids": [task_id],
                                           "state": "failed", "queue": "q", "confirm": "yes"})
        assert response.status_code == 403, path
    assert blueque.get_task(task_id).status == "failed"


SCRIPT = "<script>alert('x')</script>"


def test_untrusted_text_is_escaped_everywhere(admin, blueque, r):
    failed = fail_task(blueque, "q", parameters=f'{{"title": "{SCRIPT}"}}', error=SCRIPT,
                       traceback=SCRIPT)
    r.hset(f"blueque_task_{failed}", mapping={SCRIPT: SCRIPT, "result": SCRIPT})
    running, token = start_task(blueque, "q", parameters=SCRIPT)
    blueque.protocol.report_progress(running, token, 5, SCRIPT)
    blueque.get_queue("q").enqueue(SCRIPT)
    blueque.protocol.add_listener_v1(f"{SCRIPT.replace(' ', '')}_1", "q")
    pages = [url(""), url("listeners/"), url(f"tasks/{failed}/"), url(f"tasks/{running}/")]
    pages += [url("", name="q", state=state)
              for state in ("pending", "started", "reserved", "failed")]
    for page in pages:
        text = body(admin.get(page))
        assert "<script>alert" not in text, page
        assert "&lt;script&gt;alert(" in text, page
    confirm = body(admin.post(url("actions/"), {"action": "retry", "ids": [failed]}))
    assert "<script>alert" not in confirm


def test_a_queue_name_with_markup_is_escaped(admin, blueque):
    fail_task(blueque, "<b>q</b>")
    page = body(admin.get(url("")))
    assert "<b>q</b>" not in page and "&lt;b&gt;q&lt;/b&gt;" in page
    assert admin.get(url("", name="<b>q</b>", state="failed")).status_code == 200


@pytest.mark.parametrize("path", [
    "tasks/no-such-task/", "tasks/no-such-task/progress/", "tasks/" + "x" * 600 + "/",
    "tasks/a%20b/", "tasks/a%0Ab/",
    "queue/", "?name=", "?name=nope", "?name=a%20b",
    "?name=q&state=nope", "?name=q&state=failed&p=abc",
    "?name=q&state=failed&p=0", "?name=q&state=failed&p=-1",
    "?name=q&state=failed&p=99999999999999999999",
    "?name=q&state=failed&per_page=7", "?name=q&state=failed&per_page=x",
    "bulk/", "bulk/?action=retry&state=complete&queue=q", "bulk/?action=retry&state=failed",
    "bulk/?action=retry&state=failed&queue=q",
])
def test_unknown_or_malformed_names_are_404(admin, blueque, task_id, path):
    assert admin.get(f"/admin/django_blueque/queue/{path}").status_code == 404


@pytest.mark.parametrize("data", [
    {"action": "explode", "ids": ["x"]},
    {"action": "retry", "ids": ["a b"]},
    {"action": "retry", "ids": ["x" * 600]},
    {"action": "retry", "ids": [f"id-{n}" for n in range(1001)]},
])
def test_malformed_action_forms_are_400(admin, blueque, data):
    assert admin.post(url("actions/"), data).status_code == 400


@pytest.mark.parametrize(("path", "data"), [
    ("listeners/requeue/", {"queue": "q", "listener": "a b"}),
    ("listeners/requeue/", {"listener": "a_1"}),
    ("bulk/start/", {"action": "retry", "state": "complete", "queue": "q"}),
    ("bulk/start/", {"action": "purge", "state": "failed", "queue": "q"}),
    ("bulk/step/", {"action": "delete", "state": "pending", "queue": "q"}),
    ("bulk/stop/", {"action": "delete", "state": "failed", "queue": ""}),
])
def test_malformed_forms_are_400(admin, blueque, path, data):
    assert admin.post(url(path), data).status_code == 400


def test_find_with_a_bad_or_unknown_id_says_so(admin, blueque):
    for given in ("", "a b", "no-such-task"):
        response = admin.get(url("find/", id=given), follow=True)
        assert response.status_code == 200
        assert response.redirect_chain[-1][0] == "/admin/django_blueque/queue/"
        assert "task" in " ".join(str(m) for m in response.context["messages"])


def test_find_goes_back_only_to_this_site(admin, blueque):
    response = admin.get(url("find/", id="nope", next="https://evil.example/"))
    assert response["Location"] == "/admin/django_blueque/queue/"
    response = admin.get(url("find/", id="nope", next="/admin/django_blueque/queue/listeners/"))
    assert response["Location"] == "/admin/django_blueque/queue/listeners/"


def test_a_task_with_bytes_that_are_not_utf8_renders(admin, blueque, r):
    task_id = fail_task(blueque, "q")
    raw = r.connection_pool.get_connection()
    raw.send_command("HSET", f"blueque_task_{task_id}", "parameters", b"\xff\xfe pickle \x80")
    raw.read_response()
    r.connection_pool.release(raw)
    for page in (url(f"tasks/{task_id}/"), url("", name="q", state="failed")):
        response = admin.get(page)
        assert response.status_code == 200
        assert "\ufffd\ufffd pickle \ufffd" in body(response)


def test_a_task_id_no_path_can_hold_is_found_and_shown(admin, blueque, r):
    r.hset("blueque_task_a/b", mapping={"status": "failed", "queue": "q"})
    r.lpush("blueque_failed_tasks_q", "a/b")
    r.zincrby("blueque_queues", 0, "q")
    listing = body(admin.get(url("", name="q", state="failed")))
    assert "/admin/django_blueque/queue/find/?id=a%2Fb" in listing
    response = admin.get(url("find/", id="a/b"))
    assert response.status_code == 200 and "Task a/b" in body(response)


TOKEN = "s3cret-token-of-16+chars"


def test_metrics_accept_a_bearer_token(client, settings, redis_url, db):
    settings.BLUEQUE = {**settings.BLUEQUE, "URL": redis_url, "METRICS_TOKEN": TOKEN}
    for path in ("metrics/", "metrics.json"):
        ok = client.get(url(path), HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert ok.status_code == 200
        wrong = client.get(url(path), HTTP_AUTHORIZATION="Bearer wrong-token-xxxxxxxx")
        assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
        assert client.get(url(path)).status_code == 302  # no token: the staff login
    assert client.get(url(""), HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 302


def test_metrics_refuse_any_token_when_none_is_configured(client, blueque, db):
    response = client.get(url("metrics/"), HTTP_AUTHORIZATION="Bearer anything-at-all-here")
    assert response.status_code == 401
