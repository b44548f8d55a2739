"""The soak's fault injector against a listener that exited on its own just before its fault
(one restarting while Redis is away refuses to start): the fault says so in its line, and
leaves no harness error and no expectation behind that would hide a later unexpected exit."""

import contextlib
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


def test_a_listener_restarted_after_the_fault_chose_it_is_not_signalled(tmp_path):
    """The fault chooses a listener whose run has just died, and the supervisor restarts it
    before the signal: the signal goes to the run chosen (gone), never to the new process
    before it handles it (seed 4444: a SIGHUP killed a listener 0.1 s old, an unexpected
    exit)."""
    listener = Supervised("listener-1", [sys.executable, "-c", "import time; time.sleep(60)"],
                          None, tmp_path)
    listener.start()
    listener.runs[-1][1] -= 10  # up long enough for a fault to choose it
    os.kill(listener.pid, signal.SIGKILL)
    listener.proc.wait()
    (tmp_path / "events.log").touch()
    soak = SimpleNamespace(listeners=[listener], signalled={}, fault_rng=random.Random(1),
                           events_path=tmp_path / "events.log")
    faults = Faults(soak)
    choose = faults._listener

    def choose_then_restart(*args):
        chosen = choose(*args)
        listener.start()  # the supervisor saw the exit meanwhile
        return chosen

    faults._listener = choose_then_restart
    try:
        assert faults.run("listener_hup").endswith("it had exited on its own (see 'refused "
                                                   "to start')")
        time.sleep(0.3)
        assert listener.proc.poll() is None, "the new process was signalled"
    finally:
        listener.proc.kill()
        listener.proc.wait()


@contextlib.contextmanager
def listener_with_a_child(tmp_path):
    """A stand-in listener (a process named like bq_listen, SIGHUP ignored as the real one
    handles it) with one child, up long enough for a fault to choose it."""
    script = ("import signal, subprocess, sys, time; signal.signal(signal.SIGHUP, "
              "signal.SIG_IGN); subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(60)', 'bq_listen']); time.sleep(60)")
    listener = Supervised("listener-0", [sys.executable, "-c", script, "bq_listen"], None,
                          tmp_path)
    listener.start()
    try:
        deadline = time.monotonic() + 10
        while not descendants_of(listener.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        [child] = descendants_of(listener.pid)
        listener.runs[-1][1] -= 10
        events = tmp_path / "events.log"
        events.touch()
        soak = SimpleNamespace(listeners=[listener], signalled={}, fault_rng=random.Random(1),
                               keys=Keys(), events_path=events, abandoned={},
                               lock=threading.Lock(), kind_of=lambda task_id: task_id[:3])
        yield Faults(soak), listener, child
    finally:
        for pid in [*descendants_of(listener.pid), listener.pid]:
            os.kill(pid, signal.SIGKILL)
        listener.proc.wait()


def write_event(faults, *fields):
    with open(faults.soak.events_path, "a") as log:
        log.write(" ".join(map(str, fields)) + "\n")


def test_an_idle_listener_with_its_spare_is_idle_and_one_running_a_task_is_not(tmp_path):
    """A listener keeps one spare process while idle: the idle fault must still find it (the
    short soak of seed 20103 found "none was idle" for 60 s when idle meant no children)."""
    with listener_with_a_child(tmp_path) as (faults, listener, child):
        assert faults.watch.idle_listeners() == [listener]
        write_event(faults, "start", "some-task", 1, child, f"{time.time():.3f}")
        assert faults.watch.idle_listeners() == []
        write_event(faults, "end", "some-task", 1, child, f"{time.time():.3f}", "ok")
        assert faults.watch.idle_listeners() == [listener]


def test_a_task_left_by_a_listener_asked_to_stop_is_not_tended(tmp_path):
    """The task-stop fault must stop a task whose listener renews its lease. A short soak
    (seed 653749) stopped one its listener had left at a SIGTERM then SIGHUP: its lease
    lapsed, as it must, and the soak counted the second run as a defect. A SIGHUP restart
    keeps the pid, so being below the listener is not enough: started since it was asked."""
    with listener_with_a_child(tmp_path) as (faults, listener, child):
        write_event(faults, "start", "task-a", 1, child, f"{time.time():.3f}")
        assert faults.watch.tended_tasks() == {child: "task-a"}
        assert faults.run("listener_hup") == f"SIGHUP listener-0 (pid {listener.pid})"
        assert faults.watch.tended_tasks() == {}
        time.sleep(0.01)
        write_event(faults, "end", "task-a", 1, child, f"{time.time():.3f}", "ok")
        write_event(faults, "start", "task-b", 1, child, f"{time.time():.3f}")
        assert faults.watch.tended_tasks() == {child: "task-b"}
        faults.soak.signalled[listener.pid] = time.time()  # a SIGTERM: stopping gracefully
        assert faults.watch.tended_tasks() == {}


def test_a_gil_run_is_recorded_as_left_when_its_listener_stops_at_once(tmp_path):
    """A SIGHUP after a SIGTERM stops a listener at once: a "gil" task's process it leaves
    renews nobody's lease (its own thread cannot run), so the ledger must not count its
    second run against the engine; a first stop alone (graceful: the listener still renews)
    leaves nothing."""
    with listener_with_a_child(tmp_path) as (faults, listener, child):
        write_event(faults, "start", "gil-task", 1, child, f"{time.time():.3f}")
        faults.run("listener_hup")
        assert faults.soak.abandoned == {}
        faults.soak.signalled[listener.pid] = time.time()  # it had a SIGTERM
        faults.run("listener_hup")
        assert faults.soak.abandoned == {"gil-task": {child}}
