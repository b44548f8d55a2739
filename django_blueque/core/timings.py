"""Every liveness timing of the engine, in one object.

A running task holds a *lease* (a key with an expiry on Redis's clock); a listener holds a
*heartbeat* on each of its queues. Both are renewed well before they lapse, and the reaper acts
on one only after it has seen it lapsed for ``confirm`` seconds. The relations between these
numbers are what the liveness promises stand on (docs/explanation/liveness.rst), so they are
checked here once, and the object is passed down (``Client(timings=...)``, the ``TIMINGS`` key
of the Django setting) instead of being read from module constants: a test runs the same rules
with a lease of a few seconds, a deployment may choose a longer one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Timings:
    """Seconds, all of them.

    ``lease``: a task's lease lasts this long without renewal. Its process renews it every
    ``lease / 3`` and its listener every ``heartbeat / 3`` (at each heartbeat); a task process
    that could confirm it by neither way for ``lease`` seconds stops its task (the reaper may
    have given it to another process by then).
    ``heartbeat``: a busy listener counts as alive this long after its last beat.
    ``idle_heartbeat``: the same for a listener with no task (fewer commands while idle).
    ``confirm``: the reaper acts on a lapsed lease or heartbeat once it has seen it lapsed
    this long (a process that lost Redis for less gets it back first).
    ``retry``: pause between two attempts to reach Redis while it does not answer.
    ``handover``: a task handed to its process later than this after it was taken (its
    listener was stopped in between) is confirmed with Redis before its code starts.
    ``block``: how long one blocking peek lasts before the listener renews it.
    """

    lease: float = 15.0
    heartbeat: float = 15.0
    idle_heartbeat: float = 180.0
    confirm: float = 8.0
    retry: float = 1.0
    handover: float = 1.0
    block: float = 60.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise ValueError(f"timings: {field.name} must be a positive number of "
                                 f"seconds, not {value!r}")
        if self.idle_heartbeat < self.heartbeat:
            raise ValueError("timings: idle_heartbeat must be at least heartbeat")
        if self.retry >= self.lease / 3:
            raise ValueError("timings: retry must be shorter than a third of the lease (a "
                             "process must renew more than once before its lease lapses)")
        if self.handover >= self.lease:
            raise ValueError("timings: handover must be shorter than the lease")
        if self.confirm < 2 * self.retry:
            raise ValueError("timings: confirm must be at least twice retry (a process "
                             "that lost Redis for a moment must get its lease back first)")

    @property
    def renew_every(self) -> float:
        """How often a task's process renews its lease."""
        return self.lease / 3

    @property
    def beat_every(self) -> float:
        """How often a busy listener beats (and renews its tasks' leases)."""
        return min(self.heartbeat, self.lease) / 3

    @property
    def max_gap(self) -> float:
        """Reaper passes further apart than this (on Redis's clock) start its watch over."""
        return self.lease / 2

    @property
    def cut_off(self) -> float:
        """A task process whose lease nobody confirmed for this long stops its task."""
        return self.lease

    def for_queue(self, policy: Mapping[str, Any]) -> Timings:
        """These timings with a queue's own lease (its policy's ``lease``: QUEUES' LEASE), for
        tasks that may hold their process longer than the others without a word. Only longer
        than the lease of every other timing's relations: the listener beats for all its
        queues at the pace of the shortest."""
        lease = policy.get("lease")
        if lease is None or lease == self.lease:
            return self
        if isinstance(lease, bool) or not isinstance(lease, (int, float)) or lease < self.lease:
            raise ValueError(f"a queue's lease must be a number of seconds at least the "
                             f"global lease ({self.lease:g} s), not {lease!r}")
        return replace(self, lease=float(lease))

    @classmethod
    def from_setting(cls, value: object) -> Timings:
        """From the Django setting's ``TIMINGS`` dict (keys in capitals, ``LEASE``...)."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise ValueError(f"timings must be a dict, not {type(value).__name__}")
        names = {field.name.upper(): field.name for field in fields(cls)}
        unknown = sorted(set(map(str, value)) - set(names))
        if unknown:
            raise ValueError(f"timings: unknown key(s) {', '.join(unknown)}; the keys are "
                             f"{', '.join(names)}")
        return cls(**{names[key]: seconds for key, seconds in value.items()})


DEFAULT = Timings()
