"""What the management commands run: the listener, the scheduler and the reaper, configured
from the settings and the registry. The commands only parse arguments and call these."""

import logging
import time

import redis
from croniter import croniter

from .actions import advance_bulk_jobs
from .conf import get_client, get_settings
from .core import ForkingRunner, enqueue_due_tasks, reap
from .registry import close_connections_before_fork, registered_tasks, run_task, task_ended

logger = logging.getLogger("django_blueque.scheduler")
reaper_logger = logging.getLogger("django_blueque.reaper")


def retention_for(queue):
    return get_settings().policy(queue)["retention"]


def reap_once(dry_run=False):
    """One reaper pass over every queue, and a bounded step of the admin's running bulk jobs
    (so they finish with no page open); returns the reaper's Actions."""
    actions = reap(get_client(), retention=retention_for, dry_run=dry_run)
    if not dry_run:
        advance_bulk_jobs()
    return actions


def latest_due(periodic, at):
    """The most recent due time of a periodic task at time ``at`` (Unix seconds)."""
    if periodic.interval:
        return (at // periodic.interval) * periodic.interval
    return croniter(periodic.cron, at).get_prev(float)


def enqueue_periodic(at=None):
    """Enqueue each periodic task once per due time, exactly once however many schedulers run:
    the due time is claimed and the task written in one WATCH/MULTI transaction. After
    downtime only the latest missed run is made (no burst of catch-up runs); the first time a
    task is seen, its current due time is recorded without running it."""
    client = get_client()
    at = time.time() if at is None else at
    started = []
    for task in registered_tasks().values():
        if task.periodic is None:
            continue
        due = latest_due(task.periodic, at)
        key = client.keys.periodic(task.queue)
        with client.redis.pipeline() as pipe:
            try:
                pipe.watch(key)
                last = pipe.get(key)
                if last is not None and float(last) >= due:
                    continue
                pipe.multi()
                pipe.set(key, repr(due))
                if last is not None:
                    ids = client.protocol.enqueue(task.queue, [task.encode((), {})],
                                                  task.policy(), pipe=pipe)
                pipe.execute()
            except redis.WatchError:
                continue  # another scheduler claimed this due time
        if last is not None:
            logger.info("periodic task %s enqueued as %s", task.name, ids[0])
            started.append(ids[0])
    return started


def next_periodic_runs(at=None):
    """[(BluequeTask, next run as Unix time)] for the dashboard."""
    at = time.time() if at is None else at
    runs = []
    for task in registered_tasks().values():
        if task.periodic is None:
            continue
        if task.periodic.interval:
            runs.append((task, latest_due(task.periodic, at) + task.periodic.interval))
        else:
            runs.append((task, croniter(task.periodic.cron, at).get_next(float)))
    return runs


def schedule_once():
    """Move due scheduled tasks (ETAs and retry backoffs) of every queue, and enqueue due
    periodic tasks; returns {queue: [moved ids]}."""
    moved = enqueue_due_tasks(get_client())
    for queue, ids in moved.items():
        logger.info("moved %d due task(s) to %s", len(ids), queue)
    enqueue_periodic()
    return moved


def run_loop(step, interval, stop):
    """Call ``step`` every ``interval`` seconds until ``stop()`` is true, riding out Redis
    outages with a growing pause."""
    backoff = 0.0
    while not stop():
        try:
            step()
            backoff = 0.0
            pause = interval
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            backoff = min(max(backoff * 2, 0.5), 10.0)
            logger.warning("Redis unreachable (%s); retrying in %.1f s", exc, backoff)
            pause = backoff
        deadline = time.monotonic() + pause
        while not stop() and time.monotonic() < deadline:
            time.sleep(min(0.1, pause))


def build_listener(queues, concurrency=None, burst=False, max_tasks=None, duties=False):
    """A ForkingRunner on ``queues`` running the registered functions. With ``duties`` the
    listener also runs the scheduler and the reaper (enough for a one-machine deployment)."""
    conf = get_settings()
    periodic_duties = None
    if duties:
        def periodic_duties():
            schedule_once()
            for action in reap_once():
                reaper_logger.info("%s", action)

    return ForkingRunner(
        get_client(), queues, run_task, concurrency or conf.concurrency, burst=burst,
        max_tasks=max_tasks, kill_grace=conf.kill_grace, retention=conf.retention,
        duties=periodic_duties, duties_interval=conf.scheduler_interval,
        before_fork=close_connections_before_fork, on_task_end=task_ended)
