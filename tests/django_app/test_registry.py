"""@blueque_task: registration, enqueueing with checked JSON arguments, results, eager mode."""

import datetime
import decimal
import json
import uuid

import pytest
import redis
from demo.tasks import failing_task, long_task, report
from django.db import connection, transaction

from django_blueque import blueque_task, get_result, signals
from django_blueque.core import Task
from django_blueque.registry import (
    AlreadyRegistered,
    BluequeTask,
    registered_tasks,
    task_for_queue,
)


def test_default_queue_is_the_dotted_path_and_function_stays_callable():
    @blueque_task
    def add(a, b=1):
        return a + b

    assert isinstance(add, BluequeTask)
    assert add.queue == f"{add.func.__module__}.{add.func.__qualname__}"
    assert add.queue.startswith(__name__ + ".test_default_queue")
    assert add(2, b=3) == 5
    assert task_for_queue(add.queue) is add


def test_two_functions_for_one_queue_is_an_error_naming_both():
    @blueque_task(queue="tests.shared")
    def first():
        pass

    with pytest.raises(AlreadyRegistered) as caught:
        @blueque_task(queue="tests.shared")
        def second():
            pass
    assert "first" in str(caught.value) and "second" in str(caught.value)


@pytest.mark.parametrize(("options", "needle"), [
    ({"memory_limit": "lots"}, "a memory limit is a number of bytes or a size such as '512M'"),
    ({"cpu_limit": -1}, "a CPU limit is a number of seconds > 0, not -1"),
])
def test_a_malformed_limit_fails_at_import_naming_the_task(options, needle):
    with pytest.raises(ValueError, match=needle) as caught:
        @blueque_task(queue="tests.limited", **options)
        def limited():
            pass
    assert str(caught.value).startswith("tests.django_app.test_registry.")


def test_a_checkpointing_task_runs_as_a_plain_call_and_eagerly(settings):
    from demo.tasks import resumable_import

    assert resumable_import(rows=3) == {"resumed_at": 0, "rows": 3}  # always a first run
    settings.BLUEQUE = {"URL": "redis://127.0.0.1:1/0", "EAGER": True}  # no Redis needed
    result = get_result(resumable_import.enqueue(rows=4))
    assert (result.status, result.result) == ("complete", {"resumed_at": 0, "rows": 4})


def test_autodiscovery_registered_the_demo_tasks():
    assert {"demo.long", "demo.fail", "demo.flaky", "demo.report", "demo.tick"} <= set(
        registered_tasks())


def test_enqueue_writes_plain_json_with_the_protocol_fields(blueque, r):
    task_id = long_task.enqueue(steps=3, delay=0.5)
    uuid.UUID(task_id)
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert json.loads(fields["parameters"]) == {"steps": 3, "delay": 0.5}
    assert fields["status"] == "pending" and fields["queue"] == "demo.long"
    assert fields["timeout"] == "3600"
    assert r.lrange("blueque_pending_tasks_demo.long", 0, -1) == [task_id]
    assert r.zscore("blueque_queues", "demo.long") == 0


def test_using_sets_a_priority_for_its_calls_only_over_the_decorators(blueque, r):
    @blueque_task(queue="tests.encode", priority=-20)
    def encode(video_id):
        pass

    background = encode.enqueue(video_id=1)
    urgent = encode.using(priority=10).enqueue(video_id=2)
    plain = encode.using(priority=0).schedule(datetime.timedelta(hours=1), video_id=3)
    assert encode.priority == -20 and encode.using(priority=10).queue == "tests.encode"
    assert r.hget(f"blueque_task_{background}", "priority") == "-20"
    assert r.hget(f"blueque_task_{urgent}", "priority") == "10"
    assert r.hget(f"blueque_task_{plain}", "priority") is None
    assert r.zrange("blueque_prioritized_tests.encode", 0, -1) == [urgent, background]
    with pytest.raises(ValueError, match="priority must be a whole number"):
        encode.using(priority=500)
    with pytest.raises(ValueError, match="priority must be a whole number"):
        blueque_task(queue="tests.bad_priority", priority="high")(lambda: None)


def test_positional_arguments_are_sent_by_name(blueque, r):
    task_id = long_task.enqueue(4)
    assert json.loads(r.hget(f"blueque_task_{task_id}", "parameters")) == {"steps": 4}


def test_django_json_types_are_allowed(blueque, r):
    task_id = report.enqueue(title=decimal.Decimal("1.5"))
    assert json.loads(r.hget(f"blueque_task_{task_id}", "parameters")) == {"title": "1.5"}


@pytest.mark.parametrize("call,error,needle", [
    (lambda: long_task.enqueue(stepz=3), TypeError, "stepz"),
    (lambda: long_task.enqueue(1, 2, 3), TypeError, "too many"),
    (lambda: long_task.enqueue(steps=object()), TypeError, "'steps'"),
    (lambda: long_task.enqueue(steps={1, 2}), TypeError, "'steps'"),
    (lambda: long_task.enqueue(delay=float("nan")), ValueError, "'delay'"),
    (lambda: report.schedule(datetime.datetime(2030, 1, 1), title="x"), ValueError, "aware"),
    (lambda: report.schedule("tomorrow", title="x"), TypeError, "eta"),
])
def test_bad_arguments_fail_at_enqueue_and_write_nothing(blueque, r, call, error, needle):
    with pytest.raises(error, match=needle):
        call()
    assert r.dbsize() == 0


def test_schedule_with_timedelta_and_aware_datetime(blueque, r):
    soon = report.schedule(datetime.timedelta(seconds=60), title="a")
    later = report.schedule(datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC), title="b")
    scheduled = dict(r.zrange("blueque_scheduled_tasks_demo.report", 0, -1, withscores=True))
    assert set(scheduled) == {soon, later}
    assert scheduled[later] == datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC).timestamp()
    assert r.hget(f"blueque_task_{soon}", "status") == "scheduled"


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_writes_only_when_the_transaction_commits(blueque, r):
    with transaction.atomic():
        task_id = long_task.enqueue_on_commit(steps=2)
        assert r.exists(f"blueque_task_{task_id}") == 0
    assert r.hget(f"blueque_task_{task_id}", "status") == "pending"
    assert r.lrange("blueque_pending_tasks_demo.long", 0, -1) == [task_id]


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_writes_nothing_on_rollback(blueque, r):
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            long_task.enqueue_on_commit(steps=2)
            raise RuntimeError("rolled back")
    assert r.dbsize() == 0


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_checks_arguments_at_once(blueque, r):
    with transaction.atomic():
        with pytest.raises(TypeError, match="'steps'"):
            long_task.enqueue_on_commit(steps=object())
    assert r.dbsize() == 0


def test_enqueue_sends_the_enqueued_signal(blueque):
    seen = []

    def receiver(sender, task_id, arguments, **kwargs):
        seen.append((sender, task_id, arguments))

    signals.task_enqueued.connect(receiver)
    try:
        task_id = report.enqueue(title="x")
    finally:
        signals.task_enqueued.disconnect(receiver)
    assert seen == [(report, task_id, '{"title":"x"}')]


def test_eager_mode_runs_inline_with_the_same_checks_and_results(settings, redis_url, r):
    settings.BLUEQUE = {"URL": "redis://127.0.0.1:1/0", "EAGER": True}  # no Redis needed
    ok = report.enqueue(title="inline")
    result = get_result(ok)
    assert result.status == "complete" and result.result["title"] == "inline"
    failed = get_result(failing_task.enqueue(message="boom"))
    assert failed.status == "failed" and failed.error == "boom"
    assert failed.error_type == "builtins.RuntimeError" and "RuntimeError" in failed.traceback
    with pytest.raises(TypeError, match="'steps'"):
        long_task.enqueue(steps=object())
    assert r.dbsize() == 0


def test_unknown_task_reads_status_none(blueque):
    assert get_result(str(uuid.uuid4())).status is None


def test_cache_option_reuses_a_django_redis_cache(settings, redis_url, r):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": redis_url}}
    settings.BLUEQUE = {"CACHE": "default"}
    task_id = report.enqueue(title="via cache")
    assert r.hget(f"blueque_task_{task_id}", "queue") == "demo.report"
    from django.core.cache import cache

    cache.set("still-bytes", 1)  # the cache keeps working on its own (bytes) connection
    assert cache.get("still-bytes") == 1


def test_redis_down_raises_a_connection_error_at_use(settings):
    settings.BLUEQUE = {"URL": "redis://127.0.0.1:1/0"}
    with pytest.raises(redis.ConnectionError):
        report.enqueue(title="x")


def test_database_alias_is_passed_to_on_commit(blueque):
    with pytest.raises(Exception, match="nope"):
        report.enqueue_on_commit(title="x", using="nope")
    assert connection.alias == "default"


def test_a_task_hash_without_parameters_fails_with_a_readable_error():
    @blueque_task(queue="no.parameters")
    def takes_nothing():
        return None

    with pytest.raises(ValueError, match="parameters are not JSON"):
        takes_nothing.run_wire(Task("t1", {"queue": "no.parameters", "status": "started"}))
