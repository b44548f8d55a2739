"""The dashboard's figures for machines: JSON and Prometheus' text format."""


from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from ..conf import get_client
from ..queries import METRICS_QUEUES, Reader
from ..queries.run_times import RUN_TIME_BUCKETS, RUN_TIME_WINDOW, histogram, recent_run_times
from ..rows import STATES
from .common import metrics_view


@require_GET
@metrics_view(json=True)
def metrics_json(request):
    """The dashboard's figures as JSON, for the METRICS_QUEUES queues with the most
    listeners (``queues_total`` says how many there are)."""
    overview = Reader(get_client()).overview(per_page=METRICS_QUEUES)
    return JsonResponse(overview.as_dict(), json_dumps_params={"allow_nan": False})


def _label(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@require_GET
@metrics_view
def metrics(request):
    """The dashboard's figures in Prometheus' text format, for the METRICS_QUEUES queues with
    the most listeners (blueque_queues_known says how many there are)."""
    reader = Reader(get_client())
    overview = reader.overview(per_page=METRICS_QUEUES)
    lines = []

    def family(name, kind, help_text, samples):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{key}="{_label(val)}"' for key, val in labels.items())
            sample = value if isinstance(value, int) else repr(float(value))
            lines.append(f"{name}{{{text}}} {sample}" if text else f"{name} {sample}")

    queues = overview.queues
    family("blueque_tasks", "gauge", "Tasks of a queue in each state.",
           [({"queue": q.name, "state": state}, q.counts[state])
            for q in queues for state in STATES])
    family("blueque_listeners", "gauge", "Listeners of a queue: live, stale (heartbeat "
           "expired) and v1 (blueque 1.0, no heartbeat).",
           [({"queue": q.name, "state": kind}, len(q.listeners_of(kind)))
            for q in queues for kind in ("live", "stale", "v1")])
    family("blueque_waiting_tasks", "gauge", "Tasks of a queue waiting for their "
           "dependencies (in no list a worker takes from).",
           [({"queue": q.name}, q.waiting) for q in queues])
    family("blueque_held_tasks", "gauge", "Pending tasks of a queue set aside until a run of "
           "their concurrency key ends (MAX_RUNNING_PER_KEY; not in the pending count).",
           [({"queue": q.name}, q.held) for q in queues])
    family("blueque_oldest_pending_age_seconds", "gauge", "How long the oldest pending task "
           "of a queue has been waiting (0 when none waits).",
           [({"queue": q.name}, q.oldest_pending_age or 0.0) for q in queues])
    family("blueque_listener_heartbeat_age_seconds", "gauge",
           "Seconds since a listener's last heartbeat.",
           [({"queue": listener.queue, "listener": listener.id}, listener.heartbeat_age)
            for listener in overview.listeners if listener.heartbeat_age is not None])
    family("blueque_listener_held_tasks", "gauge",
           "Tasks in a listener's reserved list (reserved and started).",
           [({"queue": listener.queue, "listener": listener.id}, listener.held)
            for listener in overview.listeners])
    family("blueque_bulk_jobs_running", "gauge", "Bulk actions running on a queue.",
           [({"queue": q.name}, len(q.jobs)) for q in queues])
    _run_time_families(family, recent_run_times(reader, [q.name for q in queues]))
    family("blueque_queues_known", "gauge", f"Queues in blueque_queues and registered (the "
           f"series above cover at most {METRICS_QUEUES} of them).", [({}, overview.total)])
    family("blueque_unreadable_keys", "gauge", "Keys read for these figures that hold the "
           "wrong type of value (counted as empty).", [({}, len(overview.unreadable))])
    return HttpResponse("\n".join(lines) + "\n",
                        content_type="text/plain; version=0.0.4; charset=utf-8")


def _run_time_families(family, durations):
    """Run times of each queue's newest finished tasks, by outcome, as a histogram's series
    (``_bucket`` with ``le``, ``_sum``, ``_count``; none for an outcome without runs). Gauges,
    not a histogram: they describe a window of recent runs, which moves and can shrink, so
    ``histogram_quantile`` applies to them directly, never after ``rate()``."""
    bounds = [*(repr(float(bound)) for bound in RUN_TIME_BUCKETS), "+Inf"]
    series = [({"queue": queue, "outcome": outcome}, *histogram(seconds))
              for queue, outcomes in durations.items()
              for outcome, seconds in outcomes.items() if seconds]
    what = (f"of the newest {RUN_TIME_WINDOW} runs of a queue that ended with that outcome "
            "(started to finished)")
    family("blueque_recent_run_seconds_bucket", "gauge", f"Runs no longer than le seconds, {what}.",
           [(dict(labels, le=bound), count) for labels, counts, _ in series
            for bound, count in zip(bounds, counts, strict=True)])
    family("blueque_recent_run_seconds_sum", "gauge", f"Seconds the runs took, {what}.",
           [(labels, total) for labels, _, total in series])
    family("blueque_recent_run_seconds_count", "gauge", f"Runs counted, {what}.",
           [(labels, counts[-1]) for labels, counts, _ in series])
