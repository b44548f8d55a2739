"""devtools/redis_cluster.py itself: the cluster it starts is one redis-py's RedisCluster can use,
a live slot move keeps every key readable, and close() leaves no server behind."""

import os

import pytest
from redis.cluster import RedisCluster

from devtools.redis_cluster import LocalCluster

pytestmark = pytest.mark.django_agnostic


@pytest.fixture
def cluster(redis_cluster):
    return redis_cluster


@pytest.fixture
def rc(cluster):
    client = RedisCluster.from_url(cluster.url, decode_responses=True)
    yield client
    client.close()


def test_hash_tags_spread_over_the_masters(cluster, rc):
    owners = {}
    for tag in "abcdefghij":
        rc.set(f"{{{tag}}}key", tag)
        port = cluster.owner_port(cluster.slot_of(f"{{{tag}}}key"))
        owners.setdefault(port, tag)
        # A plain client on the owner serves the key itself: no MOVED.
        assert cluster.client(port).get(f"{{{tag}}}key") == tag.encode()
    assert len(owners) > 1
    assert set(owners) <= set(cluster.ports)


def test_slot_move_keeps_every_key_readable(cluster, rc):
    keys = {f"{{q}}{i}": str(i) for i in range(50)}
    for key, value in keys.items():
        rc.set(key, value)
    slot = cluster.slot_of("{q}")
    source = cluster.owner_port(slot)
    target = next(port for port in cluster.ports if port != source)
    left_on_source = []

    def between():
        """Mid-move: the keys are split between the two nodes, and redis-py finds them all."""
        assert {key: rc.get(key) for key in keys} == keys
        left_on_source.append(cluster.client(source).cluster("COUNTKEYSINSLOT", slot))
        rc.set(f"{{q}}new-{len(left_on_source)}", "x")  # a new key goes to the target (ASK)

    cluster.move_slot(slot, target, keys_per_step=1, between=between)

    assert any(0 < count < len(keys) for count in left_on_source)
    assert cluster.owner_port(slot) == target
    assert all(cluster.owner_port(slot, port) == target for port in cluster.ports)
    assert {key: rc.get(key) for key in keys} == keys
    assert rc.get("{q}new-1") == "x"
    assert cluster.client(source).cluster("COUNTKEYSINSLOT", slot) == 0
    new_keys = len(left_on_source)
    assert cluster.client(target).cluster("COUNTKEYSINSLOT", slot) == len(keys) + new_keys


def test_close_leaves_no_server():
    local = LocalCluster(masters=3).start()
    pids = [node.process.pid for node in local.nodes]
    dirs = [node.dir for node in local.nodes]
    local.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not any(os.path.exists(path) for path in dirs)
