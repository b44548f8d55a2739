"""Redis being away, and how every loop of the engine rides it out.

Redis can be unreachable, restarting (LOADING), failing over (READONLY, MASTERDOWN), full
(OOM under ``noeviction``), busy (a long script), or, in a cluster, moving a slot (TRYAGAIN,
a script's "non local key") or failing a node over (CLUSTERDOWN, redis-py's ClusterError).
None of that may make a task lose its lease or its result, nor a listener, scheduler or
reaper exit: each waits with a growing pause, logs one line when Redis goes away and one when
it answers again, and carries on.
"""

import logging
import time

import redis

TRANSIENT_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError,
                    redis.exceptions.OutOfMemoryError, redis.exceptions.TryAgainError,
                    redis.exceptions.ClusterError)
_TRANSIENT_CODES = ("LOADING", "READONLY", "OOM", "BUSY", "MASTERDOWN", "NOREPLICAS", "TRYAGAIN",
                    "CLUSTERDOWN")

MAX_PAUSE = 2.0
"""The longest pause between two tries: whatever the outage's length, work resumes within this
long of Redis answering again (a try costs a refused connection, nothing to speak of)."""


def is_transient(exc: BaseException) -> bool:
    """True for an error that says Redis is away or cannot write for now (wait and try again),
    False for one that says the data or the command is wrong (trying again will not help)."""
    if isinstance(exc, TRANSIENT_ERRORS):
        return True
    message = str(exc)
    # a script that hit the condition reports it as "<CODE> ... script: ..." or inside an ERR
    return isinstance(exc, redis.ResponseError) and (
        message.startswith(_TRANSIENT_CODES)
        or any(f" {code} " in f" {message} " for code in ("OOM", "READONLY", "LOADING"))
        or "non local key" in message)


class Outage:
    """The state of one loop's access to Redis: how long to pause after a failure, and one log
    line per change of state (not one per attempt)."""

    def __init__(self, logger: logging.Logger, who: str, first_pause: float = 0.5) -> None:
        self.logger = logger
        self.who = who
        self.first_pause = first_pause
        self.pause = 0.0
        self.since: float | None = None

    def failed(self, exc: BaseException) -> float:
        """Record a failed attempt; returns the seconds to wait before the next one."""
        if self.since is None:
            self.since = time.monotonic()
            self.logger.warning("%s: Redis %s (%s: %s); retrying until it answers", self.who,
                                "unavailable" if is_transient(exc) else "refused a command",
                                type(exc).__name__, exc)
        self.pause = min(max(self.pause * 2, self.first_pause), MAX_PAUSE)
        return self.pause

    def recovered(self) -> None:
        if self.since is not None:
            self.logger.warning("%s: Redis answers again after %.1f s", self.who,
                                time.monotonic() - self.since)
        self.since = None
        self.pause = 0.0
