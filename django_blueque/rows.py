"""What the admin pages show, as read from Redis by queries.Reader: listeners, queues with
their counts, bulk jobs. Every number written by someone else is read leniently: a value that
does not parse, or is not finite, reads as None (a page shows a dash, and metrics.json stays
JSON: no Infinity, no NaN)."""

import json
from collections import Counter
from dataclasses import dataclass, field

from django.utils.translation import pgettext_lazy

from .core import keys as k
from .core.timings import DEFAULT as TIMINGS
from .core.values import finite_number

FIRST_TIME, LAST_TIME = -62135596800.0, 253402300799.0
"""The first and the last second a date can show (years 1 and 9999, UTC)."""


def unix_time(value: object) -> float | None:
    """A Unix time a page can show as a date, else None: not a number, inf, NaN, or outside
    the years 1 to 9999 (an ETA of 1e300 a foreign producer wrote, say)."""
    seconds = finite_number(value)
    return seconds if seconds is not None and FIRST_TIME <= seconds <= LAST_TIME else None

STATES = (k.SCHEDULED, k.PENDING, k.RESERVED, k.STARTED, k.COMPLETE, k.FAILED)
STATE_LABELS = {
    k.WAITING: pgettext_lazy("task state", "waiting"),
    k.SCHEDULED: pgettext_lazy("task state", "scheduled"),
    k.PENDING: pgettext_lazy("task state", "pending"),
    k.RESERVED: pgettext_lazy("task state", "reserved"),
    k.STARTED: pgettext_lazy("task state", "started"),
    k.COMPLETE: pgettext_lazy("task state", "complete"),
    k.FAILED: pgettext_lazy("task state", "failed"),
}


def state_label(state):
    """A task state as a page shows it, in the user's language. Only the label is translated:
    the value stays the protocol's in Redis, URLs and forms. A state no engine writes (a
    foreign producer's) shows as it is."""
    return STATE_LABELS.get(state, state)

DISPLAY_CHARS = 1_000_000
"""A text field longer than this is shown cut on the task page (the rest stays in Redis)."""


def throughput_hours(now):
    """The hours (Unix time // 3600) whose throughput hashes cover the hour before ``now``."""
    hour = int(now) // 3600
    return (hour - 1, hour)


def throughput(now, hashes):
    """The last 60 minutes' ends of a queue, oldest first, as [minute's Unix time, complete,
    failed], from the hashes of throughput_hours(now) (see keys.throughput)."""
    minute = int(now) // 60
    counts = {}
    for hour, fields in zip(throughput_hours(now), hashes, strict=True):
        for name, value in fields.items():
            at, _sep, outcome = name.partition(":")
            if at.isdigit() and outcome in (k.COMPLETE, k.FAILED):
                counts[(hour * 60 + int(at), outcome)] = int(finite_number(value) or 0)
    return [[at * 60, counts.get((at, k.COMPLETE), 0), counts.get((at, k.FAILED), 0)]
            for at in range(minute - 59, minute + 1)]


def frequent_errors(now, hashes, most=3):
    """The ``most`` error types of the last 60 minutes' failed runs of a queue (retried ones
    included), most frequent first, as [(type, runs)], from the hashes of throughput_hours(now)
    (finish.lua counts each failed run under '<minute>:error:<type>')."""
    first = int(now) // 60 - 59
    counts = Counter()
    for hour, fields in zip(throughput_hours(now), hashes, strict=True):
        for name, value in fields.items():
            at, _sep, rest = name.partition(":error:")
            if _sep and at.isdigit() and hour * 60 + int(at) >= first:
                counts[rest] += int(finite_number(value) or 0)
    return [(name, runs) for name, runs in counts.most_common(most) if runs > 0]


@dataclass
class ListenerRow:
    """A listener of one queue, as the listeners set, its heartbeat and its info hash say."""

    id: str
    queue: str
    expires: float | None  # heartbeat expiry; None for a blueque 1.0 listener (no heartbeat)
    now: float
    info: dict = field(default_factory=dict)
    held: int = 0
    reserved: list = field(default_factory=list)
    running: list = field(default_factory=list)

    @property
    def host(self):
        return self.info.get("host") or (k.parse_listener_id(self.id) or (self.id, None))[0]

    @property
    def pid(self):
        return self.info.get("pid") or (k.parse_listener_id(self.id) or (None, None))[1]

    @property
    def kind(self):
        """'live', 'stale' (heartbeat expired: dead, waiting for the reaper) or 'v1'."""
        if self.expires is None:
            return "v1"
        return "live" if self.expires >= self.now else "stale"

    @property
    def beat(self):
        """Time of the last heartbeat: each beat pushes the expiry its lease ahead (the info
        hash's ``lease``: longer while idle; the default heartbeat for a listener that does not
        say);
        None for an expiry no listener of ours writes, such as -inf."""
        if self.expires is not None:
            lease = finite_number(self.info.get("lease")) or TIMINGS.heartbeat
            return finite_number(self.expires - lease)
        return finite_number(self.info.get("beat"))

    @property
    def heartbeat_age(self):
        beat = self.beat
        return None if beat is None else max(0.0, self.now - beat)

    @property
    def stopping(self):
        """Alive, but taking no new task: told to stop, it finishes its running ones."""
        return self.kind == "live" and self.info.get("stopping") == "1"


@dataclass
class ListenerGroup:
    """One listener process with its registrations on several queues, shown once."""

    members: list  # its ListenerRow of each queue, in queue order

    @property
    def id(self):
        return self.members[0].id

    @property
    def queues(self):
        return [member.queue for member in self.members]

    @property
    def kind(self):
        """'live' if any registration is, else 'stale' if any is, else 'v1'."""
        kinds = {member.kind for member in self.members}
        return "live" if "live" in kinds else "stale" if "stale" in kinds else "v1"

    @property
    def dead(self):
        """Its registrations a requeue may release (not live)."""
        return [member for member in self.members if member.kind != "live"]

    @property
    def heartbeat_age(self):
        ages = [member.heartbeat_age for member in self.members
                if member.heartbeat_age is not None]
        return min(ages) if ages else None

    @property
    def held(self):
        return sum(member.held for member in self.members)

    @property
    def running(self):
        return [task for member in self.members for task in member.running]

    @property
    def reserved(self):
        return [task for member in self.members for task in member.reserved]

    @property
    def host(self):
        return self.members[0].host

    @property
    def pid(self):
        return self.members[0].pid

    @property
    def info(self):
        return self.members[0].info

    @property
    def stopping(self):
        return any(member.stopping for member in self.members)


def group_listeners(listeners):
    """The listeners of several queues as one ListenerGroup per listener id, by id."""
    groups = {}
    for listener in listeners:
        groups.setdefault(listener.id, []).append(listener)
    return [ListenerGroup(groups[listener_id]) for listener_id in sorted(groups)]


@dataclass
class BulkJob:
    """A bulk action's progress, as recorded in Redis."""

    action: str
    state: str
    queue: str
    fields: dict

    @property
    def status(self):
        return self.fields.get("status")

    @property
    def running(self):
        return self.status == "running"

    def number(self, name):
        return int(finite_number(self.fields.get(name)) or 0)

    @property
    def total(self):
        return self.number("total")

    @property
    def processed(self):
        return self.number("processed")

    @property
    def affected(self):
        return self.number("affected")

    @property
    def percent(self):
        return 100.0 if not self.total else min(100.0, 100.0 * self.processed / self.total)

    def as_dict(self):
        return {"action": self.action, "state": self.state, "queue": self.queue,
                "status": self.status, "total": self.total, "processed": self.processed,
                "affected": self.affected, "percent": round(self.percent, 1),
                "user": self.fields.get("user"),
                "started": finite_number(self.fields.get("started")),
                "finished": finite_number(self.fields.get("finished"))}


@dataclass
class QueueStats:
    name: str
    known: bool  # listed in blueque_queues (a registered queue may not be yet)
    counts: dict
    task: str | None = None  # name of the registered task, None for a foreign queue
    oldest_pending: float | None = None  # when the oldest pending task became pending
    listeners: list = field(default_factory=list)
    jobs: list = field(default_factory=list)
    now: float = 0.0
    throughput: list = field(default_factory=list)  # see throughput()
    frequent_errors: list = field(default_factory=list)  # see frequent_errors()
    waiting: int = 0  # tasks waiting for their dependencies (not in counts: 1.0 has no such state)
    held: int = 0  # pending tasks set aside while their concurrency key is full (not in counts)
    limits: dict = field(default_factory=dict)  # Settings.admission(): this site's, per queue

    @property
    def ended_last_hour(self):
        """(complete, failed) over the last hour."""
        return (sum(minute[1] for minute in self.throughput),
                sum(minute[2] for minute in self.throughput))

    @property
    def oldest_pending_age(self):
        if self.oldest_pending is None:
            return None
        return max(0.0, self.now - self.oldest_pending)

    def listeners_of(self, kind):
        return [listener for listener in self.listeners if listener.kind == kind]

    @property
    def live(self):
        return self.listeners_of("live")

    @property
    def stale(self):
        return self.listeners_of("stale")

    @property
    def v1(self):
        return self.listeners_of("v1")

    @property
    def unserved(self):
        """Tasks wait and no listener is alive to take them (none started, or none with the
        task registered: a task module not named tasks.py is never imported)."""
        return self.counts["pending"] > 0 and not self.live and not self.v1

    @property
    def count_list(self):
        return [(state, self.counts[state]) for state in STATES]


@dataclass
class Overview:
    """The queues of one dashboard page (or of the metrics), out of ``total`` known."""

    now: float
    queues: list
    periodic: list
    total: int = 0
    page: int = 1
    pages: int = 1
    search: str = ""
    searched_all: bool = True  # False when a search stopped before reading every name
    unreadable: dict = field(default_factory=dict)  # key -> why it could not be read

    @property
    def listeners(self):
        return [listener for queue in self.queues for listener in queue.listeners]

    @property
    def unserved(self):
        return [queue for queue in self.queues if queue.unserved]

    @property
    def listener_groups(self):
        return group_listeners(self.listeners)

    @property
    def active_queues(self):
        """The queues with a task ended in the last hour (the throughput chart's)."""
        return [queue for queue in self.queues
                if any(queue.ended_last_hour) or queue.frequent_errors]

    def as_dict(self):
        """The figures of metrics.json and ``bq_status --json``."""
        return {
            "time": self.now,
            "queues_total": self.total, "page": self.page, "pages": self.pages,
            "queues": [{
                "name": queue.name, "task": queue.task, "unserved": queue.unserved,
                "counts": queue.counts, "waiting": queue.waiting, "held": queue.held,
                "limits": queue.limits,
                "oldest_pending_age": queue.oldest_pending_age,
                "listeners": {"live": len(queue.live), "stale": len(queue.stale),
                              "v1": len(queue.v1)},
                "bulk_jobs": [job.as_dict() for job in queue.jobs],
                "last_hour": dict(zip(("complete", "failed"), queue.ended_last_hour,
                                      strict=True)),
                "frequent_errors": dict(queue.frequent_errors),
            } for queue in self.queues],
            "listeners": [{
                "id": listener.id, "queue": listener.queue, "host": listener.host,
                "pid": listener.pid, "state": listener.kind, "stopping": listener.stopping,
                "heartbeat_age": listener.heartbeat_age, "held": listener.held,
            } for listener in self.listeners],
            "periodic": self.periodic,
            "unreadable": [f"{key}: {why}" for key, why in self.unreadable.items()],
        }


def pretty(value):
    """A field's text for display: JSON objects and arrays indented, anything else verbatim;
    cut past DISPLAY_CHARS. Returns (text, is_json, characters left out)."""
    if value is None:
        return None, False, 0
    text, is_json = value, False
    if value[:1] in ("{", "[") and len(value) <= DISPLAY_CHARS:
        try:
            text = json.dumps(json.loads(value), indent=2, ensure_ascii=False)
            is_json = True
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python's stack
            text = value
    if len(text) > DISPLAY_CHARS:
        return text[:DISPLAY_CHARS], is_json, len(text) - DISPLAY_CHARS
    return text, is_json, 0
