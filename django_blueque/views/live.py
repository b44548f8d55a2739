"""What a page's script polls to stay true without a reload: one small JSON object per few
seconds, ``?live=1`` on the page's own URL. ``text`` maps each element's ``data-bq-live`` key
to its new text, made by the same filters the page was rendered with; ``version`` changes when
the page would show other rows (the script then reloads it, unless the user is choosing rows);
``charts`` replaces the throughput charts (SVG), ``values`` moves the progress bars."""

import hashlib

from django.http import JsonResponse

from ..charts import queue_chart
from ..templatetags.blueque_admin import (
    bq_ago,
    bq_duration,
    bq_ended,
    bq_field,
    bq_limits,
    bq_listener_summary,
    bq_percent,
    bq_seconds_ago,
    bq_time,
)

POLL_SECONDS = 3
"""How often a page asks (the script reads it from the page)."""


def _version(*parts):
    return hashlib.sha1(repr(parts).encode(), usedforsecurity=False).hexdigest()[:16]


def dashboard_version(overview):
    return _version([queue.name for queue in overview.queues],
                    [(group.id, group.kind, group.stopping) for group in overview.listener_groups],
                    [queue.name for queue in overview.active_queues],
                    [queue.name for queue in overview.unserved])


def dashboard(overview):
    text, charts = {}, {}
    for queue in overview.queues:
        for state, count in queue.count_list:
            text[f"count {state} {queue.name}"] = str(count)
        text[f"oldest {queue.name}"] = bq_duration(queue.oldest_pending_age)
        text[f"listeners {queue.name}"] = bq_listener_summary(queue)
        text[f"ended {queue.name}"] = bq_ended(queue)
        text[f"limits {queue.name}"] = bq_limits(queue)
        text[f"keyheld {queue.name}"] = str(queue.held)
    for queue in overview.active_queues:
        charts[queue.name] = queue_chart(queue)
    for group in overview.listener_groups:
        text[f"beat {group.id}"] = bq_seconds_ago(group.heartbeat_age)
        text[f"held {group.id}"] = str(group.held)
    return JsonResponse({"version": dashboard_version(overview), "text": text,
                         "charts": charts})


def queue_version(data):
    return _version([(task.id, task.fields.get("status")) for task in data["tasks"]],
                    data["total"])


def queue(data):
    return JsonResponse({"version": queue_version(data),
                         "text": {f"tab {state}": str(count)
                                  for state, count in data["counts"].items()}})


def listeners_version(groups):
    return _version([(group.id, group.kind, group.stopping,
                      [task.id for task in group.running + group.reserved])
                     for group in groups])


def listeners(groups):
    return JsonResponse({"version": listeners_version(groups), "text": {
        f"beat {group.id}": bq_seconds_ago(group.heartbeat_age) for group in groups}})


def task_version(task, dependencies):
    """Changes with the task's state, and with the states of the tasks it waits for, that
    wait for it and of its workflow (its page then reloads: the workflow's progress moves)."""
    workflow = dependencies["workflow"]
    related = dependencies["waits_for"] + dependencies["waited_by"] + (
        workflow["tasks"] if workflow else [])
    return _version(task.status, task.fields.get("attempts"),
                    task.node_listener.kind if task.node_listener else None,
                    [(row.id, row.status) for row in related])


def task(task, times, dependencies):
    """``times``: {field: Unix time} of the task's time fields; ``dependencies``: the
    Reader's (see task_version)."""
    fields = task.fields
    text = {f"ago {name}": bq_ago(value) for name, value in times.items() if value is not None}
    text.update({f"time {name}": bq_time(value) for name, value in times.items()
                 if value is not None})
    text.update({f"field {name}": bq_field(fields.get(name, ""))
                 for name in ("progress", "progress_message")})
    text["percent"] = bq_percent(task.progress)
    text["message"] = fields.get("progress_message") or ""
    if task.lease_ttl:
        text["lease"] = bq_duration(task.lease_ttl)
    if task.node_listener and task.node_listener.heartbeat_age is not None:
        text["node beat"] = bq_seconds_ago(task.node_listener.heartbeat_age)
    return JsonResponse({"version": task_version(task, dependencies), "text": text,
                         "values": {"progress": task.progress}})
