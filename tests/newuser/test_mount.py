"""The Blueque pages need no URL step (issue 13, item 1): the admin site serves them, links stay
on the mount the user is on, and an include that requests never reach is a system check
warning, not a silent 404."""

import re

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.core.checks.registry import Tags

ADMIN_MOUNT = "/admin/django_blueque/queue/"


@pytest.fixture
def superuser(db, settings, client):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def links(page):
    return set(re.findall(r'(?:href|action)="(/admin/[^"?]*)', page))


def blueque_warnings():
    return [m for m in run_checks(tags=[Tags.urls]) if m.id.startswith("blueque.")]


def test_without_any_url_step_the_admin_site_serves_every_page(settings, superuser, blueque):
    settings.ROOT_URLCONF = "tests.newuser.urls_admin_only"
    index = superuser.get("/admin/").content.decode()
    assert "Queues and tasks" in index and f'href="{ADMIN_MOUNT}"' in index
    dashboard = superuser.get(ADMIN_MOUNT)
    assert dashboard.status_code == 200, dashboard.content[:500]
    page = dashboard.content.decode()
    assert f"{ADMIN_MOUNT}listeners/" in links(page) and f"{ADMIN_MOUNT}find/" in links(page)
    assert not [link for link in links(page) if link.startswith("/admin/blueque/")]
    from demo.tasks import long_task

    task_id = long_task.enqueue(steps=1)
    for path in (f"{ADMIN_MOUNT}tasks/{task_id}/", f"{ADMIN_MOUNT}listeners/",
                 f"{ADMIN_MOUNT}?name=demo.long&state=pending",
                 f"{ADMIN_MOUNT}metrics.json", f"{ADMIN_MOUNT}metrics/"):
        assert superuser.get(path).status_code == 200, path
    assert superuser.get(f"{ADMIN_MOUNT}tasks/no-such-task/").status_code == 404
    assert blueque_warnings() == []


def test_anonymous_users_go_to_the_admin_login(settings, client, db):
    settings.ROOT_URLCONF = "tests.newuser.urls_admin_only"
    response = client.get(f"{ADMIN_MOUNT}listeners/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


def test_an_include_behind_the_admin_catch_all_is_a_warning_and_links_avoid_it(
        settings, superuser, blueque):
    settings.ROOT_URLCONF = "tests.newuser.urls_include_after_admin"
    assert superuser.get("/admin/blueque/").status_code == 404  # the catch-all answers
    [warning] = blueque_warnings()
    assert warning.id == "blueque.W001" and "/admin/blueque/" in warning.msg
    assert "never reach" in warning.msg and "Remove the include" in warning.hint
    page = superuser.get(ADMIN_MOUNT).content.decode()
    assert f"{ADMIN_MOUNT}listeners/" in links(page)


def test_a_reachable_include_keeps_its_urls_and_the_index_leads_there(settings, superuser,
                                                                       blueque):
    settings.ROOT_URLCONF = "tests.newuser.urls_include_before_admin"
    assert blueque_warnings() == []
    response = superuser.get(ADMIN_MOUNT)
    assert response.status_code == 302 and response["Location"] == "/admin/blueque/"
    page = superuser.get("/admin/blueque/").content.decode()
    assert "/admin/blueque/listeners/" in links(page)
    queue = superuser.get("/admin/blueque/?name=demo.long")  # a queue's page, on that mount
    assert queue.status_code == 200 and queue.context["queue"] == "demo.long"
