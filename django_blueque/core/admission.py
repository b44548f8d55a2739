"""Which task of a queue may start now: the concurrency and rate limits every listener obeys.

They are checked by take.lua, in the step that starts a task, on Redis's data and clock, so
they hold across every listener and node however many slots there are:

- ``max_running``: at most this many tasks of the queue started at once. The count is the
  queue's started set (the protocol's own record of what runs), so a run frees its slot in the
  script that records its end, whatever the end (finish.lua: complete, failed, retried, or
  recovered by the reaper from a dead process), and never by a timer. A take that finds the
  queue full flags it (Keys.full); the next end wakes the listeners waiting on Keys.slot_wake.
- ``max_running_per_key``: tasks sharing a ``concurrency_key`` field never run more than this
  many at once. A task whose key is full when it comes up is set aside (Keys.held), so the
  tasks of other keys go past it; the end of a run of its key puts the oldest one back at the
  head of the queue.
- ``rate``: at most ``count`` starts in any ``seconds`` (a sliding window of start times,
  Keys.starts). A take beyond it says how long until the window allows one; the listener
  leaves the queue alone until then.

blueque 1.0 workers sharing the Redis know nothing of these limits and take what they find.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .keys import valid_name

CONCURRENCY_KEY_LONGEST = 200
"""Most characters of a concurrency key (it is part of members Redis sorts)."""

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*([smh])\s*$")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(text: object) -> tuple[int, float]:
    """``(starts, seconds)`` of a rate limit such as ``"30/m"`` (also ``/s``, ``/h``, and a
    window of several units, ``"100/10m"``); ValueError naming what is wrong."""
    found = _RATE.match(text) if isinstance(text, str) else None
    if not found:
        raise ValueError(f"a rate limit is '<starts>/<s, m or h>' such as '30/m', not {text!r}")
    count, many, unit = int(found[1]), float(found[2] or 1), found[3]
    if count < 1 or many <= 0:
        raise ValueError(f"a rate limit allows at least one start in a window longer than "
                         f"0, not {text!r}")
    return count, many * _UNIT_SECONDS[unit]


def _positive_int(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1 or None, not {value!r}")
    return value


@dataclass(frozen=True)
class Admission:
    """A queue's limits (None: no such limit)."""

    max_running: int | None = None
    max_running_per_key: int | None = None
    rate: tuple[int, float] | None = None  # (starts, seconds)

    @classmethod
    def of(cls, policy: Mapping[str, Any]) -> Admission:
        """From a listener's policy for a queue (its ``max_running``, ``max_running_per_key``
        and ``rate_limit`` entries, as the settings give them)."""
        rate = policy.get("rate_limit")
        return cls(_positive_int("max_running", policy.get("max_running")),
                   _positive_int("max_running_per_key", policy.get("max_running_per_key")),
                   parse_rate(rate) if rate is not None else None)

    def __bool__(self) -> bool:
        return bool(self.max_running or self.max_running_per_key or self.rate)

    def script_args(self) -> list[str | int | float]:
        """take.lua's arguments for these limits ('' for none)."""
        count, seconds = self.rate or ("", "")
        return [self.max_running or "", self.max_running_per_key or "", count, seconds]


def concurrency_fields(concurrency_key: str | None) -> dict[str, str]:
    """The task-hash field of a task that shares a concurrency key (none without one)."""
    if concurrency_key is None:
        return {}
    if not valid_name(concurrency_key, CONCURRENCY_KEY_LONGEST):
        raise ValueError(f"concurrency_key must be a non-empty string of at most "
                         f"{CONCURRENCY_KEY_LONGEST} characters without whitespace, not "
                         f"{concurrency_key!r}")
    return {"concurrency_key": concurrency_key}
