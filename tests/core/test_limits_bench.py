"""bench/limits.py's short version as a real subprocess: both drains measured, every hand-over
of a full queue waited for the run before it to end although its listener had a slot free,
and nothing of the benchmark left running."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.servers import wait_for
from tests.core.helpers import tagged_pids

# one after another with the soak: each would starve the others' timers of CPU
pytestmark = [pytest.mark.django_agnostic, pytest.mark.xdist_group("cpu-bound")]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "limits.py"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_limits_benchmark_measures_the_drain_and_the_hand_over_of_a_slot():
    proc = subprocess.run([sys.executable, str(BENCH), "--rounds", "1", "--drain", "20",
                           "--handovers", "3"],
                          capture_output=True, text=True, timeout=170, cwd=BENCH.parent.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    drain, drains = report["drain_tasks_per_s"], report["raw"]["drains"]
    assert drain["none"] > 0 and drain["max_running"] > 0 and report["drain_ratio_per_round"] > 0
    # one drain of each kind, every task of it started and timed
    assert [(d["tasks"], d["timed"]) for kind in ("none", "max_running")
            for d in drains[kind]] == [(20, 20)] * 2
    assert report["drain_ratio_per_round"] == pytest.approx(
        drains["max_running"][0]["tasks_per_s"] / drains["none"][0]["tasks_per_s"])
    gaps = report["raw"]["handovers"]
    assert {kind: len(found) for kind, found in gaps.items()} == {"max_running": 3, "none": 3}
    # MAX_RUNNING 1 on a listener of 2 slots: the second task's code starts after the first
    # task's end, every time (without the limit it would start while the first one runs)
    assert all(gap > 0 for gap in gaps["max_running"]), gaps
    assert all(gap > 0 for gap in gaps["none"]), gaps
    slot = report["slot_to_start"]["max_running"]
    assert 0 < slot["median_ms"] <= slot["p90_ms"]
    assert "MAX_RUNNING 1 on 2 slots" in proc.stdout
    wait_for(lambda: not tagged_pids(str(BENCH)), 10, lambda: tagged_pids(str(BENCH)))
