"""The liveness timings (timings.py): one object, its relations checked, passed down to every
part of the engine from the Client."""

import logging
import math

import pytest
import redis

from django_blueque.core import Client, Timings
from django_blueque.core.maintenance import Reaper
from django_blueque.core.outages import Outage


def test_the_defaults_are_the_documented_ones():
    timings = Timings()
    assert (timings.lease, timings.heartbeat, timings.idle_heartbeat, timings.confirm) == (
        15, 15, 180, 8)
    assert (timings.renew_every, timings.beat_every, timings.max_gap, timings.cut_off) == (
        5, 5, 7.5, 15)


@pytest.mark.parametrize("options, message", [
    ({"lease": 0}, "lease must be a positive number"),
    ({"lease": math.inf}, "lease must be a positive number"),
    ({"confirm": "8"}, "confirm must be a positive number"),
    ({"heartbeat": True}, "heartbeat must be a positive number"),
    ({"idle_heartbeat": 10}, "idle_heartbeat must be at least heartbeat"),
    ({"lease": 3, "retry": 1}, "retry must be shorter than a third of the lease"),
    ({"handover": 20}, "handover must be shorter than the lease"),
    ({"confirm": 1.5}, "confirm must be at least twice retry"),
])
def test_timings_whose_relations_break_a_promise_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Timings(**options)


def test_the_setting_names_the_keys_it_does_not_know():
    with pytest.raises(ValueError, match="unknown key.*LEASES.*the keys are LEASE"):
        Timings.from_setting({"LEASES": 30})
    assert Timings.from_setting({"LEASE": 30, "CONFIRM": 10}) == Timings(lease=30, confirm=10)
    assert Timings.from_setting(None) == Timings()


def test_the_clients_timings_reach_its_protocol_and_reaper(redis_url):
    timings = Timings(lease=6, confirm=3, retry=0.5)
    client = Client(redis_url, timings=timings)
    try:
        assert client.protocol.timings is timings
        reaper = Reaper(client.protocol)
        assert (reaper.confirm, reaper.max_gap) == (3, 3)
        task_id = client.get_queue("q").enqueue("p")
        assert client.protocol.take("q", "host-a_1", "token", 4242)[0] == task_id
        ttl = client.redis.pttl(f"blueque_lease_{task_id}")
        assert 5000 < ttl <= 6000  # the take gave the lease the client's length
    finally:
        client.redis.close()


def test_a_queue_may_have_a_longer_lease_never_a_shorter_one():
    timings = Timings(lease=15)
    assert timings.for_queue({}) is timings and timings.for_queue({"lease": 15}) is timings
    longer = timings.for_queue({"lease": 600})
    assert (longer.lease, longer.renew_every, longer.cut_off) == (600, 200, 600)
    assert longer.heartbeat == timings.heartbeat and longer.confirm == timings.confirm
    for bad in (10, 0, -1, "60", True):
        with pytest.raises(ValueError, match="at least the global lease"):
            timings.for_queue({"lease": bad})


def test_the_pause_between_tries_while_redis_is_away_stays_short():
    """A listener, scheduler or reaper waits out an outage with a pause that doubles from 0.5 s
    to 2 s, never longer: work resumes within 2 s of Redis's return, however long it was away
    (it used to grow to 10 s, and a listener took tasks again up to 10 s late)."""
    outage = Outage(logging.getLogger("test"), "test")
    error = redis.ConnectionError("Connection refused")
    assert [outage.failed(error) for _ in range(8)] == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    outage.recovered()
    assert outage.failed(error) == 0.5  # a new outage starts short again
