"""Issue 41: a task's exception reaches Sentry (sentry-sdk with its Django integration, as a
project's settings would initialize it) from the task's own forked process, with the task's
id, queue and attempt as tags; a transport that records events to a file stands for the
network. Its sending thread takes a while per event, as a real one does, so the event is
recorded only if the task's process flushes it before it exits."""

import json
import time

import pytest
import sentry_sdk
from demo.tasks import failing_task, flaky_task
from sentry_sdk.integrations.django import DjangoIntegration
from sentry_sdk.transport import Transport
from sentry_sdk.worker import BackgroundWorker

from django_blueque.services import build_listener

pytestmark = pytest.mark.django_db  # the forked task processes check their connections


class RecordingTransport(Transport):
    path = None

    def __init__(self, options=None):
        super().__init__(options)
        self._worker = BackgroundWorker()

    def capture_envelope(self, envelope):
        self._worker.submit(lambda: self._record(envelope))

    def _record(self, envelope):
        time.sleep(0.3)  # the network
        with open(self.path, "a") as file:
            for item in envelope.items:
                if item.type == "event":
                    file.write(json.dumps(item.payload.json) + "\n")

    def flush(self, timeout, callback=None):
        self._worker.flush(timeout, callback)

    def kill(self):
        self._worker.kill()


@pytest.fixture
def events(tmp_path):
    RecordingTransport.path = tmp_path / "events.jsonl"
    sentry_sdk.init(dsn="https://public@sentry.invalid/1", transport=RecordingTransport,
                    integrations=[DjangoIntegration()])
    yield lambda: [json.loads(line) for line in RecordingTransport.path.read_text().splitlines()]
    sentry_sdk.get_client().close()
    sentry_sdk.get_global_scope().set_client(None)


@pytest.fixture
def blueque(settings, redis_url):
    settings.BLUEQUE = {"URL": redis_url, "QUEUES": {"demo.flaky": {"RETRIES": 1, "BACKOFF": 0}}}


def test_a_failed_task_is_an_event_with_its_exception_and_the_task_s_tags(blueque, events, r):
    task_id = failing_task.enqueue(message="no luck")
    assert build_listener(["demo.fail"], burst=True).run()
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"
    event, = events()
    exception, = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("RuntimeError", "no luck")
    assert exception["stacktrace"]["frames"][-1]["function"] == "failing_task"
    assert event["tags"]["blueque.task_id"] == task_id
    assert event["tags"]["blueque.queue"] == "demo.fail"
    assert event["tags"]["blueque.attempt"] == "1"
    assert event["contexts"]["blueque task"]["node"] == r.hget(f"blueque_task_{task_id}", "node")
    assert event["extra"]["blueque_task_id"] == task_id  # the log record's attributes


def test_each_failed_attempt_is_an_event_tagged_with_its_attempt(blueque, events, r):
    task_id = flaky_task.enqueue(succeed_on=3)  # one retry allowed: fails twice, for good
    assert build_listener(["demo.flaky"], burst=True).run()
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"
    assert sorted(event["tags"]["blueque.attempt"] for event in events()) == ["1", "2"]
    assert {event["tags"]["blueque.task_id"] for event in events()} == {task_id}
