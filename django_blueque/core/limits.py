"""Memory and CPU limits of a task's process, and the resources a run used.

The limits are rlimits, set by the task process on itself once it knows its queue, before the
task's code: no permission is needed (a process may always lower its own limits), they bind
only that process, and the kernel enforces them. Memory is RLIMIT_DATA, not RLIMIT_AS: since
Linux 4.7 RLIMIT_DATA counts the process's private writable memory (heap, anonymous mappings,
thread stacks), which is what a task allocates, while RLIMIT_AS also counts address space
reserved and never used (glibc reserves 64 MiB per thread arena, numpy and CUDA reserve more),
so a limit on it fails tasks that use far less. An allocation past the limit fails: Python
raises MemoryError, which the run records as ``django_blueque.core.limits.MemoryLimitExceeded``;
nothing is killed, so no neighbour task, listener or OOM killer is involved. CPU is RLIMIT_CPU:
SIGXCPU at the limit (recorded as ``django_blueque.core.limits.CpuLimitExceeded``), SIGKILL
from the kernel CPU_GRACE seconds of CPU later.
cgroup v2 would also bound page cache and the task's subprocesses together, but needs a
delegated cgroup the listener may write to; rlimits need nothing.
"""

from __future__ import annotations

import math
import os
import re
import resource
import signal
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .values import error_type

CPU_GRACE = 5
"""Seconds of CPU between SIGXCPU (the run fails, recording why) and the kernel's SIGKILL."""

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)


class MemoryLimitExceeded(Exception):
    """A task's process allocated past its memory limit."""


class CpuLimitExceeded(BaseException):
    """A task's process used up its CPU limit. A BaseException, as StopRequested: a task's
    ``except Exception`` does not swallow it."""


def memory_bytes(value: object) -> int:
    """A memory limit in bytes: a whole number of bytes, or a string such as ``"512M"``,
    ``"2G"`` or ``"1.5GiB"`` (binary units); ValueError saying what is wrong otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    size = float(match[1]) * _UNITS[match[2].upper()] if match else 0
    if size < 1:
        raise ValueError(f"a memory limit is a number of bytes or a size such as '512M' or "
                         f"'2G', not {value!r}")
    return int(size)


def cpu_seconds(value: object) -> int:
    """A CPU limit in whole seconds (rounded up), > 0; ValueError otherwise."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"a CPU limit is a number of seconds > 0, not {value!r}")
    return math.ceil(value)


def size_text(size: float) -> str:
    """``2 GiB``, ``512 MiB``, ``1.5 GiB``: bytes as people read them."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{int(size)} B"


def memory_message(limit: int) -> str:
    return f"exceeded its memory limit of {size_text(limit)}"


def cpu_message(limit: int) -> str:
    return f"exceeded its CPU limit of {limit} s"


@contextmanager
def limited(policy: Mapping[str, Any]) -> Iterator[None]:
    """Run the block (the task's code) under the policy's ``memory_limit`` (bytes) and
    ``cpu_limit`` (seconds), set on this process; a MemoryError under the limit leaves as
    MemoryLimitExceeded, SIGXCPU as CpuLimitExceeded."""
    memory, cpu = policy.get("memory_limit"), policy.get("cpu_limit")
    if memory:
        _lower(resource.RLIMIT_DATA, memory, memory)
    if cpu:
        signal.signal(signal.SIGXCPU, _cpu_exceeded(cpu))
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = math.ceil(used.ru_utime + used.ru_stime)  # what the fork and set-up took
        _lower(resource.RLIMIT_CPU, spent + cpu, spent + cpu + CPU_GRACE)
    try:
        yield
    except MemoryError as exc:
        if not memory:
            raise
        traceback.clear_frames(exc.__traceback__)  # frees what the task held, to record it
        raise MemoryLimitExceeded(memory_message(memory)) from None
    finally:
        if cpu:  # the code is done: recording its end is not to be interrupted
            signal.signal(signal.SIGXCPU, signal.SIG_IGN)


def _lower(which: int, soft: int, hard: int) -> None:
    """Lower a limit (never raise one the listener was started under)."""
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY:
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(which, (soft, hard))


def _cpu_exceeded(limit: int) -> Any:
    def handler(signum: int, frame: object) -> None:
        raise CpuLimitExceeded(cpu_message(limit))
    return handler


def died_of_limit(policy: Mapping[str, Any], status: int, used: Mapping[str, float]
                  ) -> tuple[str, str] | None:
    """(error, error type) for a task process that died without recording its end because of
    a limit: the kernel's SIGXCPU or SIGKILL past its CPU limit, or any death near its memory
    limit (a C extension that aborts when malloc fails); None for another death. The error
    type is the one the process records when it sees the limit itself."""
    cpu, memory = policy.get("cpu_limit"), policy.get("memory_limit")
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)
    if cpu and killed and used["cpu"] >= cpu:
        return cpu_message(cpu), error_type(CpuLimitExceeded)
    if memory and used["peak_memory"] >= 0.9 * memory:
        return memory_message(memory), error_type(MemoryLimitExceeded)
    return None


def usage(rusage: Any) -> dict[str, float]:
    """A run's peak memory (bytes: Linux's ru_maxrss is in KiB) and CPU seconds (user +
    system) from a struct rusage, as its ``usage`` entry stores them."""
    return {"peak_memory": rusage.ru_maxrss * 1024,
            "cpu": round(rusage.ru_utime + rusage.ru_stime, 3)}


def own_usage() -> dict[str, float]:
    return usage(resource.getrusage(resource.RUSAGE_SELF))
