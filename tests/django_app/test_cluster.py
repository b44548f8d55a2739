"""The Django side in cluster mode (``BLUEQUE = {"URL": node, "CLUSTER": True}``) on a real
3-master Redis Cluster: the demo's tasks through real bq_listen, bq_schedule and bq_reap
processes, bq_status, and the admin pages."""

import json
import time

import pytest
from demo.tasks import failing_task, flaky_task, long_task, report

from django_blueque import get_result
from django_blueque.conf import get_client

from .conftest import Manage

DEMO_QUEUES = ("demo.long", "demo.fail", "demo.flaky", "demo.report")


@pytest.fixture
def manage(settings, redis_cluster, tmp_path):
    """manage.py commands (and this process's settings) on the redis_cluster."""
    for port in redis_cluster.ports:  # the cluster is the session's: emptied for each test
        redis_cluster.client(port).flushall()
    settings.BLUEQUE = {**settings.BLUEQUE, "URL": redis_cluster.url, "CLUSTER": True}
    runner = Manage(redis_cluster.url, tmp_path)
    runner.env["BLUEQUE_CLUSTER"] = "1"
    yield runner
    runner.stop_all()


def test_the_demo_queues_are_spread_over_the_masters(redis_cluster):
    owners = {redis_cluster.owner_port(redis_cluster.slot_of(f"{{{queue}}}"))
              for queue in DEMO_QUEUES}
    assert len(owners) == 3  # so the tests below cross every master


def test_the_demo_tasks_run_through_the_commands(manage):
    listener = manage.start("bq_listen", "--noreload", "-c", "3", *DEMO_QUEUES)
    scheduler = manage.start("bq_schedule", "--interval", "0.2")
    reaper = manage.start("bq_reap", "--interval", "1")
    failed = get_result(failing_task.enqueue(message="no luck"))
    flaky = get_result(flaky_task.enqueue(succeed_on=2))
    later = get_result(report.schedule(time.time() + 1, title="later"))
    long = get_result(long_task.enqueue(steps=4, delay=0))
    assert failed.wait(timeout=30).status == "failed"
    assert failed.error_type == "builtins.RuntimeError"
    assert flaky.wait(timeout=30).status == "complete" and flaky.attempts == 2
    assert later.wait(timeout=30).status == "complete"
    assert long.wait(timeout=30).result == {"steps": 4, "seconds": 0.0}
    status = manage.run("bq_status", "--json")
    assert status.returncode == 0, status.stderr
    shown = {row["name"]: row for row in json.loads(status.stdout)["queues"]}
    assert shown["demo.fail"]["counts"]["failed"] == 1
    assert shown["demo.long"]["counts"]["complete"] == 1
    assert shown["demo.flaky"]["last_hour"] == {"complete": 1, "failed": 0}
    assert {queue: row["listeners"]["live"] for queue, row in shown.items()
            if queue in DEMO_QUEUES} == dict.fromkeys(DEMO_QUEUES, 1)
    for process in (listener, scheduler, reaper):
        assert process.poll() is None
    manage.stop_all()
    output = "".join(process.stdout.read() for process in (scheduler, reaper))
    assert "Traceback" not in output and "ERROR" not in output, output


@pytest.mark.django_db
def test_the_admin_pages_read_the_cluster(manage, client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "r@x.org", "pw"))
    failed = failing_task.enqueue(message="shown")
    waiting = report.enqueue(title="waiting")
    listener = manage.start("bq_listen", "--noreload", "demo.fail")
    assert get_result(failed).wait(timeout=30).status == "failed"
    listener.terminate()
    listener.wait(15)
    # a listener of a queue no task of this project names (found through the queues set)
    get_client().protocol.heartbeat("elsewhere~1_7", ["other.queue"], {"host": "elsewhere"})
    pages = {
        "dashboard": "/admin/django_blueque/queue/",
        "failed": "/admin/django_blueque/queue/?name=demo.fail&state=failed",
        "pending": "/admin/django_blueque/queue/?name=demo.report&state=pending",
        "task": f"/admin/django_blueque/queue/tasks/{failed}/",
        "listeners": "/admin/django_blueque/queue/listeners/",
        "metrics": "/admin/django_blueque/queue/metrics/",
    }
    responses = {name: client.get(path) for name, path in pages.items()}
    assert {name: response.status_code for name, response in responses.items()} == dict.fromkeys(
        pages, 200)
    assert "demo.fail" in responses["dashboard"].content.decode()
    assert failed in responses["failed"].content.decode()
    assert waiting in responses["pending"].content.decode()
    assert "shown" in responses["task"].content.decode()
    # run times read across the masters (issue 41)
    assert 'blueque_recent_run_seconds_count{queue="demo.fail",outcome="failed"} 1' in \
        responses["metrics"].content.decode()
    assert [(row.id, row.queues, row.kind) for row in responses["listeners"].context[
        "listeners"]] == [("elsewhere~1_7", ["other.queue"], "live")]
    retry = client.post("/admin/django_blueque/queue/actions/", {"action": "retry", "ids": [failed],
                                                     "confirm": "yes"})
    assert retry.status_code == 302
    assert get_result(failed).status == "pending"


def test_djangos_tasks_framework_on_the_cluster(settings, manage):
    """BluequeBackend's two queues, on a cluster: enqueue(), bq_listen, TaskResult."""
    from tests.django_app.test_tasks_backend import ROOT, TASKS, finished

    settings.TASKS = TASKS
    manage.env.update(DJANGO_SETTINGS_MODULE="tests.django_app.tasks_settings",
                      PYTHONPATH=str(ROOT))
    from django_blueque.tasks_compat import TaskResultStatus
    from tests.django_app import tasks_framework as tasks

    added = tasks.add.enqueue(2, 3)
    shouted = tasks.shout.enqueue(text="hi")  # queue "other": another slot
    assert added.id.endswith("{django.tasks.default}")
    manage.start("bq_listen", "--noreload")
    assert finished(added).status == TaskResultStatus.SUCCESSFUL and added.return_value == 5
    assert finished(shouted).return_value == "HI"
    assert tasks.add.get_result(added.id).return_value == 5
