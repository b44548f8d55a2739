"""The test suite's own set-up, checked where it runs: runtests.py runs it under xdist with
``--dist loadgroup``, and tests that must not run beside one another (the soak, the
benchmarks' smoke tests: ``xdist_group("cpu-bound")``) rely on their group."""

import pytest


@pytest.mark.xdist_group("cpu-bound")
def test_a_test_of_a_group_is_scheduled_with_its_group(request):
    """xdist marks a grouped test's node id with its group, and schedules by that mark. With
    pytest 9.2 and xdist 3.8 the mark silently did not take (pytest-dev/pytest-xdist#1386):
    the soak and the benchmarks then ran beside one another, and a benchmark's check that it
    left no process behind found another benchmark's."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("run without xdist's --dist loadgroup: no groups to check")
    assert request.node.nodeid.endswith("@cpu-bound"), request.node.nodeid
