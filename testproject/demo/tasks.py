"""The demo's tasks: a long one that reports progress, one that fails, one that fails twice and
then succeeds (retries), a periodic one, a video pipeline (workflows), one that resumes
from its checkpoint and one with memory and CPU limits."""

import os
import signal
import time

from django_blueque import blueque_task, current_task


@blueque_task(queue="demo.long", timeout=3600)
def long_task(steps=20, delay=0.5):
    """Pretend to encode a video: ``steps`` steps of ``delay`` seconds, reporting progress."""
    task = current_task()
    for step in range(steps):
        if task and task.should_stop():
            return {"stopped_at": step}
        time.sleep(delay)
        if task:
            task.report_progress(100 * (step + 1) / steps, f"step {step + 1} of {steps}")
    return {"steps": steps, "seconds": steps * delay}


@blueque_task(queue="demo.fail")
def failing_task(message="this task always fails"):
    raise RuntimeError(message)


@blueque_task(queue="demo.flaky")
def flaky_task(succeed_on=3):
    """Fails until its ``succeed_on``-th attempt (the queue allows 2 retries, 1 s backoff)."""
    attempt = current_task().attempt if current_task() else 1
    if attempt < succeed_on:
        raise RuntimeError(f"attempt {attempt} failed")
    return {"attempt": attempt}


@blueque_task(queue="demo.report")
def report(title="daily report"):
    """A short task, for scheduling."""
    return {"title": title, "made_at": time.time()}


@blueque_task(queue="demo.tick", periodic=60)
def tick():
    """A periodic task: runs once a minute."""
    return time.time()


# The video pipeline of docs/howto/workflows.rst: download, encode in several formats side by
# side, publish once they all are done.

@blueque_task(queue="demo.download")
def download(url):
    return {"path": f"/tmp/{url.rsplit('/', 1)[-1]}"}


@blueque_task(queue="demo.encode")
def encode(fmt, fail=False):
    if fail:
        raise RuntimeError(f"cannot encode to {fmt}")
    downloaded = next(iter(current_task().dependency_results.values()))
    return {"format": fmt, "file": f"{downloaded['path']}.{fmt}"}


@blueque_task(queue="demo.publish")
def publish():
    return sorted(encoded["file"] for encoded in current_task().dependency_results.values())


@blueque_task(queue="demo.resumable", retries=3, backoff=1)
def resumable_import(rows=10, crash_after=None):
    """Import ``rows`` rows, checkpointing after each, so that a run killed half way (here by
    ``crash_after``: its first run SIGKILLs itself after that many rows) resumes where it
    stopped instead of starting over."""
    task = current_task()
    first = (task.checkpoint_state or {"done": 0})["done"]
    for row in range(first, rows):
        time.sleep(0.01)  # import row number ``row``
        task.checkpoint({"done": row + 1})
        if row + 1 == crash_after and task.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)
    return {"resumed_at": first, "rows": rows}


@blueque_task(queue="demo.bounded", memory_limit="256M", cpu_limit=60)
def bounded(mib=10):
    """Hold ``mib`` MiB: past 256 MiB its run fails, naming the limit."""
    block = bytearray(mib * 1024 * 1024)
    return len(block) // (1024 * 1024)
