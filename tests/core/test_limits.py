"""Memory and CPU limits of task processes (issue 39, part 3), with real listeners and real
task processes: the kernel enforces the rlimits."""

import json

import pytest

from django_blueque.core.limits import (
    cpu_seconds,
    died_of_limit,
    memory_bytes,
    size_text,
)
from tests.core.test_runner import finished, job

MIB = 1024 * 1024


def usage_of(task):
    return json.loads(task.fields["usage"])


def test_a_task_past_its_memory_limit_fails_naming_it_while_its_neighbour_completes(
        client, r, start_runner):
    queue = client.get_queue("q")
    runner = start_runner(concurrency=2, policy=json.dumps({"memory_limit": 300 * MIB}))
    neighbour = queue.enqueue(job(sleep=2, mark="neighbour"))
    greedy = queue.enqueue(job(allocate_mib=1024), retries=1)
    task = finished(client, greedy, runner, timeout=60)
    assert (task.status, task.attempts) == ("failed", 2)  # a failed run, retried by its policy
    assert task.error == "exceeded its memory limit of 300 MiB"
    assert task.error_type == "django_blueque.core.limits.MemoryLimitExceeded"
    assert [entry["message"] for entry in task.errors] == [task.error] * 2
    runs = usage_of(task)
    assert [run["attempt"] for run in runs] == [1, 2]
    assert all(0 < run["peak_memory"] <= 300 * MIB and run["cpu"] > 0 for run in runs)
    # the neighbour ran on the same listener meanwhile, and the listener carries on
    assert finished(client, neighbour, runner).status == "complete"
    assert r.lrange("neighbour", 0, -1) == ["done"]
    assert runner.alive()
    assert finished(client, queue.enqueue(job(allocate_mib=50)), runner).status == "complete"


def test_a_task_past_its_cpu_limit_fails_naming_it(client, start_runner):
    runner = start_runner(policy=json.dumps({"cpu_limit": 1}))
    task_id = client.get_queue("q").enqueue(job(spin=60))
    task = finished(client, task_id, runner, timeout=60)
    assert (task.status, task.error) == ("failed", "exceeded its CPU limit of 1 s")
    assert task.error_type == "django_blueque.core.limits.CpuLimitExceeded"
    (run,) = usage_of(task)
    assert 1 <= run["cpu"] < 5


def test_a_task_the_kernel_kills_at_its_cpu_limit_is_described_by_its_listener(
        client, start_runner):
    runner = start_runner(policy=json.dumps({"cpu_limit": 1}))
    task_id = client.get_queue("q").enqueue(job(ignore_sigxcpu=True, spin=60))
    task = finished(client, task_id, runner, timeout=90)
    assert (task.status, task.error) == ("failed", "exceeded its CPU limit of 1 s")
    # the same error type as the process records when it sees the limit itself
    assert task.error_type == "django_blueque.core.limits.CpuLimitExceeded"
    (run,) = usage_of(task)  # recorded by the listener from wait4's rusage
    assert run["cpu"] >= 6  # the limit, then CPU_GRACE more before the kernel's SIGKILL


def test_a_run_without_limits_records_its_usage(client, start_runner):
    task_id = client.get_queue("q").enqueue(job(allocate_mib=64))
    task = finished(client, task_id, start_runner())
    (run,) = usage_of(task)
    assert run["attempt"] == 1 and run["peak_memory"] >= 64 * MIB


@pytest.mark.parametrize(("given", "expected"), [
    (2 * 1024**3, 2 * 1024**3), ("2G", 2 * 1024**3), ("512M", 512 * MIB), ("1.5GiB", 1536 * MIB),
    ("64 mb", 64 * MIB), ("100K", 102400)])
def test_memory_limits_read_as_bytes(given, expected):
    assert memory_bytes(given) == expected


@pytest.mark.parametrize("given", ["", "2X", "-1G", "0", 0, -5, True, None, 1.5, "G"])
def test_malformed_memory_limits_are_refused_clearly(given):
    with pytest.raises(ValueError, match="a memory limit is a number of bytes"):
        memory_bytes(given)


def test_cpu_limits_and_sizes():
    assert (cpu_seconds(3600), cpu_seconds(0.5)) == (3600, 1)
    for given in (0, -1, float("inf"), "60", True):
        with pytest.raises(ValueError, match="a CPU limit is a number of seconds"):
            cpu_seconds(given)
    assert (size_text(2 * 1024**3), size_text(300 * MIB), size_text(1536 * MIB)) == (
        "2 GiB", "300 MiB", "1.5 GiB")


def test_only_a_death_at_a_limit_is_blamed_on_it():
    killed = 9  # waitpid status of a SIGKILL
    policy = {"memory_limit": 100 * MIB, "cpu_limit": 10}
    assert died_of_limit(policy, killed, {"cpu": 15.0, "peak_memory": MIB})[1] == (
        "django_blueque.core.limits.CpuLimitExceeded")
    assert died_of_limit(policy, killed, {"cpu": 1.0, "peak_memory": 99 * MIB})[1] == (
        "django_blueque.core.limits.MemoryLimitExceeded")
    assert died_of_limit(policy, killed, {"cpu": 1.0, "peak_memory": MIB}) is None
    assert died_of_limit({}, killed, {"cpu": 99.0, "peak_memory": 99 * MIB}) is None
