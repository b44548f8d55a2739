"""Issue 41: one trace from a view's request span, through the enqueue (a PRODUCER span whose
context travels in the task hash), to each run of the task in its own forked process (a
CONSUMER span per run, retries included)."""

import subprocess
import sys
import textwrap

import pytest
from demo.tasks import failing_task, flaky_task
from django.db import transaction
from django.http import JsonResponse
from django.urls import path
from opentelemetry import trace

from django_blueque import registry
from django_blueque.backends import register_queues
from django_blueque.core import Client, ForkingRunner, tracing
from django_blueque.services import build_listener

# The task processes forked here run Django's callback, which checks the database connections
# it inherits (a test database in memory stays open): they may, as a listener's may.
pytestmark = pytest.mark.django_db

tracer = trace.get_tracer("tests.view")


def start_flaky(request):
    with tracer.start_as_current_span("GET /flaky/", kind=trace.SpanKind.SERVER):
        return JsonResponse({"id": flaky_task.enqueue(succeed_on=2)})


urlpatterns = [path("flaky/", start_flaky)]


@pytest.fixture
def blueque(settings, redis_url):
    settings.BLUEQUE = {"URL": redis_url, "QUEUES": {"demo.flaky": {"RETRIES": 2, "BACKOFF": 0}}}


def drain(*queues):
    """bq_listen's listener, in burst mode in this process: each task runs in a forked child."""
    assert build_listener(list(queues), burst=True).run()


def by_name(spans, name):
    return [span for span in spans if span["name"] == name]


@pytest.mark.urls(__name__)
def test_one_trace_from_the_request_through_the_enqueue_to_every_run(client, blueque, r, spans):
    task_id = client.get("/flaky/").json()["id"]
    request, = by_name(spans.here(), "GET /flaky/")
    producer, = by_name(spans.here(), "publish demo.flaky")
    assert producer["kind"] == "SpanKind.PRODUCER"
    assert producer["parent_id"] == request["context"]["span_id"]
    assert producer["context"]["trace_id"] == request["context"]["trace_id"]
    assert producer["attributes"]["messaging.message.id"] == task_id
    trace_id, span_id = producer["context"]["trace_id"][2:], producer["context"]["span_id"][2:]
    assert r.hget(f"blueque_task_{task_id}", "traceparent").startswith(
        f"00-{trace_id}-{span_id}-")

    drain("demo.flaky")

    assert r.hget(f"blueque_task_{task_id}", "status") == "complete"
    runs = sorted(by_name(spans.exported(), "demo.tasks.flaky_task"),
                  key=lambda span: span["attributes"]["blueque.attempt"])
    assert [run["attributes"]["blueque.attempt"] for run in runs] == [1, 2]
    listener_id = r.hget(f"blueque_task_{task_id}", "node")
    for run in runs:  # a new span per run, each the child of the enqueue, in one trace
        assert run["kind"] == "SpanKind.CONSUMER"
        assert run["parent_id"] == producer["context"]["span_id"]
        assert run["context"]["trace_id"] == request["context"]["trace_id"]
        assert run["attributes"]["messaging.system"] == "blueque"
        assert run["attributes"]["messaging.destination.name"] == "demo.flaky"
        assert run["attributes"]["messaging.message.id"] == task_id
        assert run["attributes"]["blueque.node"] == listener_id
    first, second = runs
    assert first["context"]["span_id"] != second["context"]["span_id"]
    assert first["attributes"]["blueque.outcome"] == "retry"
    assert first["status"] == {"status_code": "ERROR",
                               "description": "RuntimeError: attempt 1 failed"}
    exception, = [event for event in first["events"] if event["name"] == "exception"]
    assert exception["attributes"]["exception.type"] == "RuntimeError"
    assert "raise RuntimeError" in exception["attributes"]["exception.stacktrace"]
    assert second["attributes"]["blueque.outcome"] == "complete"
    assert second["status"]["status_code"] == "UNSET"
    assert not second["events"]


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_on_commit_is_the_request_s_child_once_the_transaction_commits(
        blueque, r, spans, tracer):
    with tracer.start_as_current_span("POST /videos/"):
        with transaction.atomic():
            task_id = failing_task.enqueue_on_commit(message="later")
            assert by_name(spans.here(), "publish demo.fail") == []  # nothing written yet
    request, = by_name(spans.here(), "POST /videos/")
    producer, = by_name(spans.here(), "publish demo.fail")
    assert producer["parent_id"] == request["context"]["span_id"]
    assert producer["context"]["span_id"][2:] in r.hget(f"blueque_task_{task_id}", "traceparent")


def test_a_task_enqueued_with_no_span_current_carries_no_context_and_runs_as_a_root_span(
        blueque, r, spans):
    task_id = failing_task.enqueue(message="alone")
    assert spans.here() == []
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert "traceparent" not in fields and "tracestate" not in fields
    drain("demo.fail")
    run, = by_name(spans.exported(), "demo.tasks.failing_task")
    assert run["parent_id"] is None
    assert run["attributes"]["blueque.outcome"] == "failed"
    assert run["status"]["status_code"] == "ERROR"


def test_a_foreign_producer_s_traceparent_and_tracestate_are_followed(blueque, r, spans):
    """What a producer in another language writes: W3C trace context in the task hash."""
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    r.hset("blueque_task_foreign-1", mapping={
        "status": "pending", "queue": "demo.report", "parameters": '{"title": "t"}',
        "created": "1.0", "updated": "1.0", "traceparent": f"00-{trace_id}-{parent}-01",
        "tracestate": "vendor=opaque"})
    r.lpush("blueque_pending_tasks_demo.report", "foreign-1")
    drain("demo.report")
    run, = by_name(spans.exported(), "demo.tasks.report")
    assert run["context"]["trace_id"] == f"0x{trace_id}"
    assert run["parent_id"] == f"0x{parent}"
    assert run["context"]["trace_state"] == "['{key=vendor, value=opaque}']"


def test_a_malformed_traceparent_is_ignored_and_the_run_starts_a_trace_of_its_own(
        blueque, r, spans):
    r.hset("blueque_task_foreign-2", mapping={
        "status": "pending", "queue": "demo.report", "parameters": '{"title": "t"}',
        "created": "1.0", "updated": "1.0", "traceparent": "00-not-a-context-01"})
    r.lpush("blueque_pending_tasks_demo.report", "foreign-2")
    drain("demo.report")
    assert r.hget("blueque_task_foreign-2", "status") == "complete"
    run, = by_name(spans.exported(), "demo.tasks.report")
    assert run["parent_id"] is None


def test_a_batch_enqueue_is_one_producer_span_whose_context_every_task_carries(
        blueque, r, spans, tracer, settings):
    client = Client(settings.BLUEQUE["URL"])
    with tracer.start_as_current_span("batch"):
        ids = client.get_queue("demo.report").enqueue_many(['{"title": "a"}', '{"title": "b"}'])
    producer, = by_name(spans.here(), "publish demo.report")
    assert producer["attributes"]["messaging.batch.message_count"] == 2
    parents = {r.hget(f"blueque_task_{task_id}", "traceparent") for task_id in ids}
    assert len(parents) == 1 and producer["context"]["span_id"][2:] in parents.pop()


def start_a_span_of_its_own(task):
    with tracer.start_as_current_span("inner step"):
        return "done"


def test_the_engine_s_runner_with_the_hook_and_a_span_the_task_code_starts(
        blueque, settings, spans):
    """django_blueque.core alone (blueque 1.0's API): ``around_task`` makes each run a span,
    and a span the task's code starts is its child."""
    client = Client(settings.BLUEQUE["URL"])
    with tracer.start_as_current_span("producer side"):
        task_id = client.get_queue("q").enqueue("x")
    runner = ForkingRunner(client, "q", start_a_span_of_its_own, burst=True,
                           around_task=lambda q, task, node: tracing.task_span(q, q, task, node))
    assert runner.run()
    assert client.get_task(task_id).result == "done"
    run, = by_name(spans.exported(), "q")
    inner, = by_name(spans.exported(), "inner step")
    producer, = by_name(spans.here(), "publish q")
    assert run["parent_id"] == producer["context"]["span_id"]
    assert inner["parent_id"] == run["context"]["span_id"]
    assert "blueque.outcome" not in run["attributes"]  # the Django side's on_task_end sets it


def test_without_opentelemetry_nothing_is_imported_and_enqueue_is_undecorated(redis_url):
    """The otel extra not installed (its import fails): enqueue is the plain function and a
    task process runs its task with the tracing hook in place."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["opentelemetry"] = None  # as if it were not installed
        from django_blueque.core import Client, ForkingRunner, protocol, tracing
        assert tracing.trace is None
        assert not hasattr(protocol.Protocol.enqueue, "__wrapped__")
        client = Client({redis_url!r})
        task_id = client.get_queue("q").enqueue("x")
        assert "traceparent" not in client.redis.hgetall(client.keys.task(task_id))
        runner = ForkingRunner(client, "q", lambda task: "ok:" + task.parameters, burst=True,
                               around_task=lambda q, t, node: tracing.task_span(q, q, t, node))
        assert runner.run()
        print(client.get_task(task_id).result)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok:x"


def test_a_task_of_django_s_tasks_framework_is_traced_the_same_way(blueque, settings, r,
                                                                   spans):
    settings.TASKS = {"default": {
        "BACKEND": "django_blueque.backends.BluequeBackend", "QUEUES": ["default", "other"],
        "OPTIONS": {"TASK_MODULES": ["tests.django_app.tasks_framework"]}}}
    from tests.django_app import tasks_framework

    register_queues()  # as at bq_listen's start
    with tracer.start_as_current_span("request"):
        result = tasks_framework.add.enqueue(2, 3)
    producer, = by_name(spans.here(), "publish django.tasks.default")
    try:
        drain("django.tasks.default")
    finally:
        registry._registry.pop("django.tasks.default")
        registry._registry.pop("django.tasks.other")
    assert r.hget(f"blueque_task_{result.id}", "status") == "complete"
    run, = [span for span in spans.exported() if span["kind"] == "SpanKind.CONSUMER"]
    assert run["parent_id"] == producer["context"]["span_id"]
    assert run["attributes"]["messaging.message.id"] == result.id
    assert run["name"] == "tests.django_app.tasks_framework.add"  # not the queue's runner
