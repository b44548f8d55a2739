"""The soak's fault injector against a listener that exited on its own just before its fault
(one restarting while Redis is away refuses to start): the fault says so in its line, and
leaves no harness error and no expectation behind that would hide a later unexpected exit."""

import random
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import redis

from django_blueque.core.keys import Keys

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from soak.faults import Faults  # noqa: E402
from soak.servers import Supervised  # noqa: E402


def test_a_fault_on_a_listener_gone_on_its_own_is_a_line_not_a_harness_error(tmp_path,
                                                                              redis_url):
    listener = Supervised("listener-1", [sys.executable, "-c", "pass"], None, tmp_path)
    listener.start()
    listener.proc.wait()  # exited and reaped, not yet restarted by the supervisor
    listener.runs[-1][1] -= 10  # up long enough for a fault to choose it
    (tmp_path / "events.log").touch()
    soak = SimpleNamespace(
        listeners=[listener], signalled={}, fault_rng=random.Random(1), keys=Keys(),
        redis=SimpleNamespace(admin=lambda: redis.Redis.from_url(redis_url,
                                                                 decode_responses=True)),
        events_path=tmp_path / "events.log", displaced=[], lock=threading.Lock())
    faults = Faults(soak)
    for kind, sent in (("listener_kill", "SIGKILL"), ("listener_term", "SIGTERM"),
                       ("listener_hup", "SIGHUP")):
        assert faults.run(kind) == (f"{sent} listener-1: it had exited on its own (see "
                                    f"'refused to start')")
    assert listener.expected_exits == 0 and soak.signalled == {} and soak.displaced == []
