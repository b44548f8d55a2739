"""The signals a project can connect to are sent, from the task's own process."""

from demo.tasks import failing_task, flaky_task, report

from django_blueque import get_result


def test_started_succeeded_failed_and_retried_are_sent(manage, blueque, r):
    manage.env["DJANGO_SETTINGS_MODULE"] = "tests.django_app.signal_settings"
    manage.env["PYTHONPATH"] = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    ok = report.enqueue(title="x")
    bad = failing_task.enqueue(message="no")
    flaky = flaky_task.enqueue(succeed_on=2)
    listener = manage.start("bq_listen", "--noreload", "--with-scheduler")
    assert get_result(flaky).wait(timeout=30).status == "complete"
    assert get_result(ok).wait(timeout=10).status == "complete"
    assert get_result(bad).wait(timeout=10).status == "failed"
    listener.terminate()
    listener.wait(15)
    seen = set(r.lrange("test_signals", 0, -1))
    assert {f"task_started {ok} demo.report", f"task_succeeded {ok} demo.report",
            f"task_started {bad} demo.fail", f"task_failed {bad} demo.fail",
            f"task_retried {flaky} demo.flaky", f"task_succeeded {flaky} demo.flaky"} <= seen
    assert f"task_failed {flaky} demo.flaky" not in seen
