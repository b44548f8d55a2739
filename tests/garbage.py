"""Garbage for the property tests: random values of random Redis types, written with plain
redis-py where the protocol expects something else (as a foreign producer, a half-finished
migration or anyone with write access could)."""

from hypothesis import strategies as st

from django_blueque.core import keys as k

AWKWARD = ["", "inf", "-inf", "nan", "1e400", "-1", "0", "42", "1.5", "pending", "started",
           "running", "[[[[", "{" * 50, '{"a": [1, {"b": 2}]}', "\x1b[2J\x07", "\x00\xff",
           "a/b", "a b", "x_1", "h~0_1 1 t1",
           "é\udcff".encode("utf-8", "surrogatepass").decode("latin-1")]

SCORES = st.one_of(st.floats(allow_nan=False), st.sampled_from([float("inf"), float("-inf")]))
FIELDS = st.one_of(st.sampled_from(k.PROTOCOL_FIELDS + k.EXTENSION_FIELDS), st.text(max_size=8))


def contents(words=()):
    """A strategy of (Redis type, value) pairs, or None (leave the key alone); ``words``: names
    of the test's own queues, tasks and listeners, to mix in."""
    values = st.one_of(st.sampled_from([*words, *AWKWARD]), st.text(max_size=30))
    return st.one_of(
        st.none(),
        st.tuples(st.just("string"), values),
        st.tuples(st.just("list"), st.lists(values, min_size=1, max_size=5)),
        st.tuples(st.just("set"), st.lists(values, min_size=1, max_size=5)),
        st.tuples(st.just("zset"), st.dictionaries(values, SCORES, min_size=1, max_size=5)),
        st.tuples(st.just("hash"), st.dictionaries(FIELDS, values, min_size=1, max_size=8)),
    )


def write(r, key, content):
    """Replace ``key`` by ``content`` (a pair from contents(); None leaves the key alone)."""
    if content is None:
        return
    kind, value = content
    r.delete(key)
    if kind == "string":
        r.set(key, value)
    elif kind == "list":
        r.rpush(key, *value)
    elif kind == "set":
        r.sadd(key, *value)
    elif kind == "zset":
        r.zadd(key, value)
    else:
        r.hset(key, mapping=value)
