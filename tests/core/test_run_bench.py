"""bench/run.py's short version (--quick) as a real subprocess, for the systems that need no
virtualenv from PyPI (ours and the two floors), two tasks at a time: every figure measured, every
drain complete, the listeners' processes counted, nothing left running."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import redis.utils

from tests.core.helpers import tagged_pids

BENCH = Path(__file__).resolve().parents[2] / "bench" / "run.py"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_quick_benchmark_measures_ours_beside_the_floors_two_tasks_at_a_time(tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--only", "ours", "--only",
                           "floor", "--only", "floor_ahead", "--concurrency", "2", "--json",
                           str(out)],
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["concurrency"] == 2 and set(report["systems"]) == {"ours", "floor", "floor_ahead"}
    assert report["hiredis"] is False
    for name, result in report["systems"].items():
        assert result["hiredis"] == redis.utils.HIREDIS_AVAILABLE, name
        figures, raw = result["figures"], result["raw"]
        assert all(figures[rate] > 0 for rate in ("enqueue_single", "enqueue_batched",
                                                  "fork_tasks_per_s")), name
        assert 0 < figures["pickup_p50_ms"] <= figures["pickup_p99_ms"], name
        drains = raw["throughput"]["drains"]
        assert len(drains) == report["profile"]["rounds"], name
        # two at a time, each drain is longer (run.CONCURRENT_DRAIN_TIMES), all of it timed
        # (one listener: at work from the first task)
        tasks = report["profile"]["throughput_n"] * 5
        assert all(d["tasks"] == d["timed"] == tasks for d in drains), name
    # ours keeps a task process forked ahead, by its fork server; the bare floor forks only
    # for a task, the other keeps one child forked ahead
    assert report["systems"]["ours"]["raw"]["listener_processes"] == 3
    assert report["systems"]["floor"]["raw"]["listener_processes"] == 1
    assert report["systems"]["floor_ahead"]["raw"]["listener_processes"] == 2
    assert "ours/floor (bare fork)" in proc.stdout and "2 task(s) at a time" in proc.stdout
    assert tagged_pids(str(BENCH.parent / "drivers")) == []  # every listener stopped


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
def test_the_breakdown_accounts_for_each_process_cpu_and_page_faults():
    """bench/breakdown.py: the stages of a task, the floors, and the drain's CPU account, user
    and system apart, with the page faults of the listener, of its fork server and of its
    task processes (a process per task: each forked process faults on the pages it writes)."""
    proc = subprocess.run([sys.executable, str(BENCH.parent / "breakdown.py"), "--tasks", "20"],
                          capture_output=True, text=True, timeout=280, cwd=BENCH.parent.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    account = proc.stdout.split("CPU per task while one listener drains 20 queued")[1]
    rows = {}
    for line in account.strip().splitlines()[1:]:
        total, rest = line.split(None, 1)
        rows[rest.split(" (")[0].split(":")[0]] = (float(total), rest)
    processes = ("listener", "fork server", "task processes")
    assert set(rows) == {*processes, "redis-server", "in all"}
    for who in processes:
        total, rest = rows[who]
        user, system = map(float, rest.split("(")[1].split(";")[0].split(" + "))
        faults = int(rest.split("; ")[1].split(" faults")[0])
        assert total == pytest.approx(user + system, abs=0.002), rest
        if who != "listener":  # which forks nothing: the fork server does
            assert faults > 0, rest  # a forked process writes to pages it shares: it faults
    assert rows["in all"][0] == pytest.approx(
        sum(rows[who][0] for who in (*processes, "redis-server")), abs=0.005)


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
    assert tagged_pids(str(BENCH.parent / "drivers")) == []  # every listener stopped


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_copy_on_write_pages_of_a_task_process_way_are_found_and_named():
    """bench/cow_pages.py: the pages a forked task process writes between waiting for its task
    and the task's first line (read from its page map and memory, stopped there), and the
    words changed on them."""
    proc = subprocess.run([sys.executable, str(BENCH.parent / "cow_pages.py"), "--tasks", "2"],
                          capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    for number, line in enumerate(lines[:2]):
        assert line.startswith(f"task {number}: ") and line.endswith(
            " pages written on the way to its first line"), line
        assert int(line.split(": ")[1].split()[0]) > 0, line  # a forked process writes pages
    pages = [line for line in lines[2:] if not line.startswith("    ")]
    assert len(pages) == int(lines[1].split(": ")[1].split()[0])  # the last task's, listed
    assert all(" words changed" in line for line in pages), pages
    assert tagged_pids(str(BENCH.parent / "cow_pages.py")) == []  # its listener stopped
