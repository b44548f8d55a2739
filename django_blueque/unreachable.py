"""What a producer (enqueue, schedule, cancel, get_result) raises when Redis does not answer,
or cannot take a write for now (full, loading, a replica): one exception type, naming the
setting and the Redis it points at, instead of a long redis-py traceback that names neither."""

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from .conf import redis_in_use
from .core.outages import is_transient


class RedisUnavailable(redis.ConnectionError):
    """Blueque's Redis did not answer (refused, unreachable, timed out), or cannot take this
    for now (full under ``noeviction``, loading its data, a replica since a failover). A
    subclass of ``redis.ConnectionError``; the message names the Redis setting, password
    masked."""


@contextmanager
def reaching_redis() -> Iterator[None]:
    """Turn redis-py's connection errors and timeouts, and the refusals that pass (OOM,
    LOADING, READONLY...: outages.is_transient), into RedisUnavailable (also a decorator)."""
    try:
        yield
    except RedisUnavailable:
        raise
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(
            f"Blueque's Redis does not answer: {redis_in_use()} ({exc}). Start that Redis, "
            "or point the BLUEQUE setting at one that runs.") from None
    except redis.ResponseError as exc:
        if not is_transient(exc):
            raise
        raise RedisUnavailable(
            f"Blueque's Redis cannot take this now: {redis_in_use()} ({exc}). Nothing was "
            "written; try again once it can (it is full, loading, or a replica).") from None
