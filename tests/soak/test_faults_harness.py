"""The soak's fault injector against a listener that exited on its own just before its fault
(one restarting while Redis is away refuses to start): the fault says so in its line, and
leaves no harness error and no expectation behind that would hide a later unexpected exit."""

import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import redis

from django_blueque.core.keys import Keys

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from soak.faults import Faults  # noqa: E402
from soak.servers import Supervised, descendants_of  # noqa: E402


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


def test_an_idle_listener_with_its_spare_is_idle_and_one_running_a_task_is_not(tmp_path):
    """A listener keeps one spare process while idle: the idle fault must still find it (the
    short soak of seed 20103 found "none was idle" for 60 s when idle meant no children)."""
    spare = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(60)', 'bq_listen']); time.sleep(60)")
    listener = Supervised("listener-0", [sys.executable, "-c", spare, "bq_listen"], None,
                          tmp_path)
    listener.start()
    try:
        deadline = time.monotonic() + 10
        while not descendants_of(listener.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        [child] = descendants_of(listener.pid)
        listener.runs[-1][1] -= 10  # up long enough for a fault to choose it
        events = tmp_path / "events.log"
        events.touch()
        soak = SimpleNamespace(listeners=[listener], fault_rng=random.Random(1),
                               keys=Keys(), events_path=events)
        faults = Faults(soak)
        assert faults._idle_listeners() == [listener]
        with open(events, "a") as log:
            log.write(f"start some-task 1 {child} {time.time():.3f}\n")
        assert faults._idle_listeners() == []
        with open(events, "a") as log:
            log.write(f"end some-task 1 {child} {time.time():.3f} ok\n")
        assert faults._idle_listeners() == [listener]
    finally:
        for pid in [*descendants_of(listener.pid), listener.pid]:
            os.kill(pid, signal.SIGKILL)
        listener.proc.wait()
