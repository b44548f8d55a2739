"""OpenTelemetry across the queue, when opentelemetry-api is installed (the ``otel`` extra).

An enqueue made while a span is current is a PRODUCER span, whose W3C trace context travels
in the task hash (``traceparent``, ``tracestate``: any producer may write them); each run of
the task is a CONSUMER span in the task's process, child of that context, so a request, its
enqueue and every run of its task (retries too) are one trace. Without opentelemetry, nothing
here imports it, and enqueue is the undecorated function: nothing costs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from .keys import TRACE_FIELDS

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from .task import Task

FLUSH_MILLIS = 5000
"""How long a task's process waits for its spans to be exported before it exits."""

SYSTEM = "blueque"

Enqueue = TypeVar("Enqueue", bound=Callable[..., list[str]])


def traced_enqueue(enqueue: Enqueue) -> Enqueue:
    """Decorates Protocol.enqueue: while a span is current, the enqueue is a PRODUCER span
    and the tasks written carry its context. Without opentelemetry: ``enqueue`` itself."""
    if trace is None:
        return enqueue

    @functools.wraps(enqueue)
    def traced(self: Any, queue: str, parameters_list: Any, extra: Any = None,
               *args: Any, **kwargs: Any) -> list[str]:
        if not trace.get_current_span().get_span_context().is_valid:
            return enqueue(self, queue, parameters_list, extra, *args, **kwargs)
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM, "messaging.destination.name": queue,
            "messaging.operation.type": "send"}
        if len(parameters_list) != 1:
            attributes["messaging.batch.message_count"] = len(parameters_list)
        with _tracer().start_as_current_span(f"publish {queue}", kind=trace.SpanKind.PRODUCER,
                                             attributes=attributes) as span:
            carrier: dict[str, str] = {}
            TraceContextTextMapPropagator().inject(carrier)
            ids = enqueue(self, queue, parameters_list, {**(extra or {}), **carrier},
                          *args, **kwargs)
            if len(ids) == 1:
                span.set_attribute("messaging.message.id", ids[0])
            return ids

    return traced  # type: ignore[return-value]


@contextmanager
def task_span(name: str, queue: str, task: Task, node: str) -> Iterator[None]:
    """One run of ``task``, in its process: a CONSUMER span named ``name``, child of the
    context its hash carries (a root span if none), current while the run goes on; then the
    spans of this process are exported before it exits (BatchSpanProcessor would lose them
    at ``os._exit``)."""
    if trace is None:
        yield
        return
    carried = {field: task.fields[field] for field in TRACE_FIELDS if task.fields.get(field)}
    parent = TraceContextTextMapPropagator().extract(carried) if carried else None
    attributes = {"messaging.system": SYSTEM, "messaging.destination.name": queue,
                  "messaging.message.id": task.id, "messaging.operation.type": "process",
                  "blueque.attempt": task.attempts or 1, "blueque.node": node}
    try:
        with _tracer().start_as_current_span(
                name, context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes,
                record_exception=False, set_status_on_exception=False) as span:
            try:
                yield
            except BaseException as exc:  # StopRequested too: stopped by its listener
                _failed(span, exc)
                raise
    finally:
        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            flush(FLUSH_MILLIS)


def name_run(name: str) -> None:
    """Name the current run's span after ``name``: a task known only once its parameters are
    read (Django's Tasks framework's, all run by one function per queue)."""
    if trace is not None:
        trace.get_current_span().update_name(name)


def record_failure(exc: BaseException) -> None:
    """The running task raised ``exc``: record it on the current span."""
    if trace is not None:
        _failed(trace.get_current_span(), exc)


def record_outcome(outcome: str, error: object = None) -> None:
    """How the run ended, as recorded ('complete', 'retry', 'failed', 'stale'), on the
    current span; an error (a timeout, a cancel) also sets its status if no exception did."""
    if trace is None:
        return
    span = trace.get_current_span()
    span.set_attribute("blueque.outcome", outcome)
    status = getattr(span, "status", None)  # the SDK's spans have one; a non-recording none
    if outcome in ("retry", "failed") and status and status.status_code is trace.StatusCode.UNSET:
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))


def _failed(span: Any, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


@functools.cache
def _tracer() -> Any:
    from .. import __version__

    return trace.get_tracer("django_blueque", __version__)
