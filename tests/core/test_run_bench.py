"""bench/run.py's short version (--quick) as a real subprocess, for the systems that need no
virtualenv from PyPI (ours, the engine of a git revision beside it, and the floor), two tasks at
a time: every figure measured, every drain complete, every task of 1 s ended after its second,
the listeners' processes counted, nothing left running."""

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import redis.utils

from devtools.servers import wait_for
from tests.core.helpers import tagged_pids

# one after another with the soak: each would starve the others' timers of CPU
pytestmark = [pytest.mark.django_agnostic, pytest.mark.xdist_group("cpu-bound")]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "run.py"


def _all_stopped():
    """Every listener the benchmark started is gone, a few seconds after it returned (a task
    process of a stopped listener may still be exiting on a busy machine)."""
    wait_for(lambda: not _drivers_running(), 10, lambda: "drivers still running:\n" + "\n".join(
        _describe(pid) for pid in _drivers_running()))


def _describe(pid):
    """A process's pid, parent, state and command line, to tell a leftover listener from its
    spare or a task process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return f"{pid}: gone"
    return f"{pid} (parent {stat[1]}, state {stat[0]}): {argv}"


def _drivers_running():
    """Pids of this checkout's benchmark drivers still running (their script is an argument
    of their command line, and of their forks')."""
    return [pid for driver in (BENCH.parent / "drivers").glob("*.py")
            for pid in tagged_pids(str(driver))]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_quick_benchmark_measures_ours_beside_a_revision_and_the_floor_two_at_a_time(
        tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--only", "ours", "--only",
                           "floor", "--engine", "HEAD", "--concurrency", "2", "--json",
                           str(out)],
                          capture_output=True, text=True, timeout=280, cwd=BENCH.parent.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    systems, profile = report["systems"], report["profile"]
    assert report["concurrency"] == 2 and set(systems) == {"ours", "ours@HEAD", "floor"}
    assert report["hiredis"] is False
    for name, result in systems.items():
        assert result["hiredis"] == redis.utils.HIREDIS_AVAILABLE, name
        figures, raw = result["figures"], result["raw"]
        assert all(figures[rate] > 0 for rate in ("enqueue_single", "enqueue_batched",
                                                  "fork_tasks_per_s")), name
        assert 0 < figures["pickup_p50_ms"] <= figures["pickup_p99_ms"], name
        assert len(raw["pickup_ms"]) == profile["samples"], name
        # each task of 1 s ended (as its system records it) after its second and its pickup
        assert len(raw["long_overhead_ms"]) == profile["long_samples"], name
        assert all(ms > 0 for ms in raw["long_overhead_ms"]), (name, raw["long_overhead_ms"])
        assert all(ms >= 0 for ms in raw["long_after_second_ms"]), name
        assert 0 < figures["long_p50_ms"] <= figures["long_p90_ms"], name
        drains = raw["throughput"]["drains"]
        assert len(drains) == profile["rounds"], name  # one a round
        # two at a time, each drain is longer (run.CONCURRENT_DRAIN_TIMES), all of it timed
        # (one listener: at work from the first task)
        tasks = profile["throughput_n"] * 5
        assert all(d["tasks"] == d["timed"] == tasks for d in drains), name
        # idle, ours (either engine: HEAD's is this one) keeps its spare, the floor forks only
        # for a task
        assert raw["listener_processes"] == (1 if name == "floor" else 2), name
    # the revision's engine is its own export, not this checkout
    assert systems["ours"]["source"] == str(BENCH.parent.parent)
    assert systems["ours@HEAD"]["source"] != systems["ours"]["source"]
    assert systems["ours@HEAD"]["source"].startswith(tempfile.gettempdir())
    assert "ours/ours@HEAD" in proc.stdout and "ours/floor (bare fork)" in proc.stdout
    assert "2 task(s) at a time" in proc.stdout
    _all_stopped()


@pytest.mark.skipif(redis.utils.HIREDIS_AVAILABLE, reason="this interpreter has hiredis")
def test_the_benchmark_with_hiredis_refuses_an_interpreter_without_it(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH), "--hiredis", "--quick", "--only", "ours",
                           "--venvs", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "lacks hiredis" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing built


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_ab_benchmark_runs_a_revision_beside_the_working_tree():
    """bench/ab.py: HEAD exported by git and the working tree, each measured by its own
    driver, interleaved (here two tasks at a time)."""
    proc = subprocess.run([sys.executable, str(BENCH.parent / "ab.py"), "HEAD", "--rounds", "1",
                           "--samples", "3", "--drain", "--concurrency", "2"],
                          capture_output=True, text=True, timeout=280, cwd=BENCH.parent.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["HEAD", "working tree"]
    for line in lines:
        assert "(3 samples); drain " in line and line.endswith("; 2 tasks at a time"), line
        p50, p90, p99 = map(float, line.split("p50/p90/p99 ")[1].split(" ms")[0].split("/"))
        assert 0 < p50 <= p90 <= p99, line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_interleaved_benchmark_drains_through_two_listeners_of_each_system():
    """bench/interleave.py: ours and the floor in turn, idle pickups, one-at-a-time enqueues
    and a drain through two listener processes each, timed once both have started a task."""
    proc = subprocess.run([sys.executable, str(BENCH.parent / "interleave.py"), "--only", "ours",
                           "--only", "floor", "--enqueue", "--pickup", "3", "--drain", "100",
                           "--listeners", "2", "--rounds", "2"],
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pickups, lines = proc.stdout.strip().splitlines()[:2], proc.stdout.strip().splitlines()[2:]
    for line, name in zip(pickups, ("ours", "floor"), strict=True):
        assert line.startswith(f"pickup {name}: p50 / p90 / p99 "), line
        assert line.endswith(" ms (6 samples)"), line  # 3 a round, 2 rounds
        p50, p90, p99 = map(float, line.split("p99 ")[1].split(" ms")[0].split(" / "))
        assert 0 < p50 <= p90 <= p99, line
    assert [line.split(":")[0] for line in lines] == [
        "enqueue ours", "enqueue floor", "drain ours", "drain floor"]
    for line in lines:
        rates = [float(rate) for rate in line.split("(rounds: ")[1].split(")")[0].split(", ")]
        assert len(rates) == 2 and all(rate > 0 for rate in rates), line
        assert float(line.split(": ")[1].split(" tasks/s")[0]) == pytest.approx(
            statistics.median(rates), abs=0.5), line
    assert lines[1].endswith("x") and "; ours / floor " in lines[1], lines[1]
    _all_stopped()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_breakdown_marks_every_stage_of_a_task_in_the_listener():
    """bench/breakdown.py wraps the engine's functions to mark each stage: every stage of
    each task is marked (a function renamed in the engine would leave its stage empty), and the
    stages add up (the pickup holds the take's round trip, the overhead the end's call)."""
    proc = subprocess.run([sys.executable, str(BENCH.parent / "breakdown.py"), "--tasks", "3",
                           "--seconds", "0.2", "--idle", "0.1", "0.2"],
                          capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines()[2:]:
        name, p50, p90 = line[:58].strip(), *line[58:].split()[:2]
        tasks = int(line.split()[-1])
        rows[name] = (float(p50), float(p90), tasks) if tasks else None
    beats = {"listener: hand-over to its beat", "listener: its beat (heartbeat + renewals)"}
    assert len(rows) == 20 and beats <= set(rows), rows
    for name, row in rows.items():
        if name not in beats:  # a beat falls in a task's window only now and then
            assert row is not None and row[2] == 3 and 0 <= row[0] <= row[1], (name, row)
    pickup = rows["PICKUP: enqueue call to the callback"]
    assert pickup[0] > rows["take's round trip (take.lua)"][0] > 0
    end = rows["END: callback's return to the end recorded"]
    assert rows["OVERHEAD: enqueue to end recorded, less the task's sleep"][0] > end[0] > 0
    assert tagged_pids(str(BENCH.parent / "breakdown.py")) == []  # the listener stopped
