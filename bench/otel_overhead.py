"""What OpenTelemetry costs when it is installed and no span is current (issue 41: it must be
nil), and what a run's span costs in a task's process.

    python bench/otel_overhead.py [--rounds 15] [--enqueues 2000] [--json FILE]

- enqueue: ``Protocol.enqueue`` as decorated (tracing.traced_enqueue: it reads the current
  span and finds none) against the undecorated function (``__wrapped__``, what runs without
  opentelemetry), interleaved round by round on one private Redis: median microseconds per
  enqueue of each, and their ratio.
- the check alone: the decorated call minus the undecorated one, on a stand-in enqueue that
  does nothing, so Redis's round trip does not hide it.
- a run's span (tracing.task_span, no trace context in the hash), in process: with the API's
  default no-op provider, and with the SDK's TracerProvider and a BatchSpanProcessor whose
  exporter drops spans (its flush included, as a task's process flushes before it exits).

Needs opentelemetry-api and opentelemetry-sdk in this interpreter (the test virtualenvs have
them).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from infra import private_redis  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from django_blueque.core import Client, Task, tracing  # noqa: E402
from django_blueque.core.protocol import Protocol  # noqa: E402


def per_call_us(function, count):
    started = time.perf_counter()
    for _ in range(count):
        function()
    return (time.perf_counter() - started) / count * 1e6


def enqueue_rounds(url, rounds, count):
    client = Client(url)
    protocol = client.protocol
    traced, plain = Protocol.enqueue, Protocol.enqueue.__wrapped__
    assert traced is not plain, "opentelemetry is not installed: nothing to measure"
    figures = {"traced": [], "plain": []}
    for _ in range(rounds):
        for name, enqueue in (("traced", traced), ("plain", plain)):
            client.redis.flushdb()
            figures[name].append(per_call_us(
                lambda enqueue=enqueue: enqueue(protocol, "bench", ['{"n": 1}']), count))
    return figures


def check_alone(count):
    def nothing(self, queue, parameters_list, extra=None):
        return ["id"]

    traced = tracing.traced_enqueue(nothing)
    figures = []
    for _ in range(15):
        figures.append(per_call_us(lambda: traced(None, "bench", ["x"]), count)
                       - per_call_us(lambda: nothing(None, "bench", ["x"]), count))
    return figures


class Dropped(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


def run_span_us(count):
    task = Task("bench-task", {"queue": "bench", "attempts": "1"})

    def one_run():
        with tracing.task_span("bench.task", "bench", task, "node_1"):
            pass

    noop = [per_call_us(one_run, count) for _ in range(5)]
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)
    sdk = [per_call_us(one_run, count // 10) for _ in range(5)]
    return noop, sdk


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--enqueues", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, private_redis(workdir) as url:
        enqueue = enqueue_rounds(url, args.rounds, args.enqueues)
    check = check_alone(200_000)
    noop, sdk = run_span_us(2000)
    medians = {name: statistics.median(values) for name, values in enqueue.items()}
    print(f"enqueue, no span current: {medians['traced']:.1f} us decorated, "
          f"{medians['plain']:.1f} us undecorated (median of {args.rounds} rounds of "
          f"{args.enqueues}); ratio {medians['traced'] / medians['plain']:.3f}")
    print(f"the check alone: {statistics.median(check) * 1000:.0f} ns per enqueue")
    print(f"a run's span: {statistics.median(noop):.1f} us with the API's no-op provider, "
          f"{statistics.median(sdk):.1f} us with the SDK (BatchSpanProcessor, flushed)")
    if args.json:
        args.json.write_text(json.dumps({"enqueue_us": enqueue, "check_us": check,
                                         "run_span_noop_us": noop, "run_span_sdk_us": sdk},
                                        indent=1))


if __name__ == "__main__":
    main()
