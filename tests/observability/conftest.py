"""A tracer provider for this process and the task processes it forks: the test's own spans in
OpenTelemetry's InMemorySpanExporter, and every span (the forked children's too) written by a
BatchSpanProcessor to a JSON-lines file. Its export delay is a minute, so a child's spans
reach the file only if the child flushes them before it exits."""

import json

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class JSONLinesExporter(SpanExporter):
    path = None  # set per test

    def export(self, spans):
        if self.path is not None:
            with open(self.path, "a") as file:
                file.writelines(span.to_json(indent=None) + "\n" for span in spans)
        return SpanExportResult.SUCCESS


MEMORY = InMemorySpanExporter()
FILE = JSONLinesExporter()


@pytest.fixture(scope="session")
def tracer_provider():
    """The SDK's provider, set when the first test of this folder needs it (OpenTelemetry's
    global provider is set once per process: not at collection, for the whole session)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(MEMORY))
    provider.add_span_processor(BatchSpanProcessor(FILE, schedule_delay_millis=60_000))
    trace.set_tracer_provider(provider)
    return provider


class Spans:
    """The spans this test made: in this process (in memory) and in forked ones (the file)."""

    def __init__(self, path):
        self.path = path

    def here(self):
        return [json.loads(span.to_json(indent=None)) for span in MEMORY.get_finished_spans()]

    def exported(self):
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]


@pytest.fixture
def spans(tmp_path, tracer_provider):
    MEMORY.clear()
    FILE.path = tmp_path / "spans.jsonl"
    yield Spans(FILE.path)
    FILE.path = None


@pytest.fixture
def tracer(tracer_provider):
    return trace.get_tracer("tests")


from tests.django_app.conftest import blueque, manage  # noqa: E402, F401  (shared fixtures)
