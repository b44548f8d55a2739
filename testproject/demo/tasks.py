"""The demo's tasks: a long one that reports progress, one that fails, one that fails twice and
then succeeds (retries), and a periodic one."""

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
