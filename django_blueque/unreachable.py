"""What a producer (enqueue, schedule, cancel, get_result) raises when Redis does not answer:
one exception type, naming the setting and the Redis it points at, instead of a long redis-py
traceback that names neither."""

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from .conf import redis_in_use


class RedisUnavailable(redis.ConnectionError):
    """Blueque's Redis did not answer (refused, unreachable, timed out). A subclass of
    ``redis.ConnectionError``; the message names the Redis setting, password masked."""


@contextmanager
def reaching_redis() -> Iterator[None]:
    """Turn redis-py's connection errors and timeouts into RedisUnavailable (also a decorator)."""
    try:
        yield
    except RedisUnavailable:
        raise
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(
            f"Blueque's Redis does not answer: {redis_in_use()} ({exc}). Start that Redis, "
            "or point the BLUEQUE setting at one that runs.") from None
