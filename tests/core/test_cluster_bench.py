"""bench/cluster.py's short version (--quick) as a real subprocess, so that the benchmark of
issue 15 keeps working: both set-ups measured, every task drained, nothing left running."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.helpers import tagged_pids

# one after another with the soak: each would starve the others' timers of CPU
pytestmark = [pytest.mark.django_agnostic, pytest.mark.xdist_group("cpu-bound")]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cluster.py"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_quick_cluster_benchmark_measures_both_set_ups(tmp_path):
    out = tmp_path / "cluster.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["figures"]) == {"one", "cluster"}
    for figures in report["figures"].values():
        assert all(figures[rate] > 0 for rate in ("single", "batched", "drain"))
        assert 0 < figures["pickup_p50"] <= figures["pickup_p99"]
    assert sorted(len(names) for names in report["queues"].values()) == [4, 4, 4]
    assert "3-master cluster" in proc.stdout
    assert tagged_pids(str(BENCH)) == []  # every producer and listener stopped
