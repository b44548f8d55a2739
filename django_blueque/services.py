"""What the management commands run: the listener, the scheduler and the reaper, configured
from the settings and the registry. The commands only parse arguments and call these."""

import datetime
import logging
import time
from typing import Any

import redis
from croniter import croniter
from django.utils import timezone

from .conf import get_client, get_settings
from .core import ForkingRunner, bulk, enqueue_due_tasks, reap
from .core.maintenance import RECHECK_SECONDS, Reaper
from .core.outages import Outage, is_transient
from .listener_hooks import close_connections_before_fork, run_task, task_ended
from .logs import install_task_context
from .observability import observed_run
from .registry import registered_tasks

logger = logging.getLogger("django_blueque.scheduler")
reaper_logger = logging.getLogger("django_blueque.reaper")


def reap_once(dry_run=False):
    """Reap every queue until decided (see core.reap: up to a few seconds when a lease has
    just lapsed), and advance the admin's running bulk jobs; returns the reaper's Actions."""
    actions = reap(get_client(), policy=get_settings().policy, dry_run=dry_run)
    if not dry_run:
        bulk.advance_jobs(get_client())
    return actions


class ReaperLoop:
    """The reaper as a loop's step: one Reaper that remembers what it saw between passes (it
    acts on a lapsed lease only once seen lapsed long enough) and a step of the admin's bulk
    jobs. ``report(actions)`` gets what each pass did."""

    def __init__(self, report):
        self.reaper = Reaper(get_client().protocol, policy=get_settings().policy)
        self.report = report

    def __call__(self):
        self.report(self.reaper.reap())
        bulk.advance_jobs(get_client())

    def sooner(self):
        """Look again soon while a lapsed lease is being watched."""
        return RECHECK_SECONDS if self.reaper.undecided else None


def _cron_zone():
    """Cron expressions read in Django's TIME_ZONE (UTC when USE_TZ is off and none is set)."""
    return timezone.get_default_timezone()


def latest_due(periodic, at):
    """The most recent due time of a periodic task at time ``at`` (Unix seconds); cron
    expressions are read in the project's TIME_ZONE."""
    if periodic.interval:
        return (at // periodic.interval) * periodic.interval
    moment = datetime.datetime.fromtimestamp(at, _cron_zone())
    return croniter(periodic.cron, moment).get_prev(datetime.datetime).timestamp()


def enqueue_periodic(at=None):
    """Enqueue each periodic task once per due time, exactly once however many schedulers run:
    the due time is claimed and the task written in one transaction
    (Protocol.upkeep.enqueue_periodic). After downtime only the latest missed run is made (no
    burst of catch-up runs); the first time a task is seen, its current due time is recorded
    without running it."""
    client = get_client()
    at = time.time() if at is None else at
    started = []
    for task in registered_tasks().values():
        if task.periodic is None:
            continue
        try:
            ids = client.protocol.upkeep.enqueue_periodic(
                task.queue, latest_due(task.periodic, at),
                make_task=lambda task=task: (task.encode((), {}), task.task_fields()))
        except Exception as exc:
            if is_transient(exc):
                raise  # Redis away: the loop waits it out for every task alike
            _periodic_failed(task, exc)  # this task's own fault: a key, its code, its cron
            continue
        if _failing_periodic.pop(task.queue, None):
            logger.warning("periodic task %s works again", task)
        if ids:
            logger.info("periodic task %s enqueued as %s", task.name, ids[0])
            started.append(ids[0])
    return started


_failing_periodic: dict[str, str] = {}
"""{queue: the error last logged for its periodic task}: a failure is logged once per change,
not on every pass."""


def _periodic_failed(task, exc):
    """One bad periodic task is skipped and the others still run (issue 38)."""
    problem = f"{type(exc).__name__}: {exc}"
    if _failing_periodic.get(task.queue) != problem:
        _failing_periodic[task.queue] = problem
        logger.error("periodic task %s skipped: %s", task, problem, exc_info=exc)


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
            moment = datetime.datetime.fromtimestamp(at, _cron_zone())
            runs.append((task, croniter(task.periodic.cron, moment)
                         .get_next(datetime.datetime).timestamp()))
    return runs


def schedule_once():
    """Move due scheduled tasks (ETAs and retry backoffs) of every queue, and enqueue due
    periodic tasks; returns {queue: [moved ids]}."""
    moved = enqueue_due_tasks(get_client())
    for queue, ids in moved.items():
        logger.info("moved %d due task(s) to %s", len(ids), queue)
    enqueue_periodic()
    return moved


def run_loop(step, interval, stop, name="scheduler"):
    """Call ``step`` every ``interval`` seconds (or sooner, when it has a ``sooner()`` giving a
    shorter pause) until ``stop()`` is true. Nothing makes the loop exit: Redis errors of any
    kind are waited out with a growing pause, any other error is logged with its traceback and
    the loop goes on. ``name``: the duty ('scheduler' or 'reaper'), its logger's too."""
    logger = logging.getLogger(f"django_blueque.{name}")
    outage = Outage(logger, name)
    sooner = getattr(step, "sooner", lambda: None)
    while not stop():
        try:
            step()
        except redis.RedisError as exc:
            pause = outage.failed(exc)
        except Exception:
            logger.exception("%s: a pass failed; trying again in %g s", name, interval)
            pause = interval
        else:
            outage.recovered()
            pause = min(interval, sooner() or interval)
        deadline = time.monotonic() + pause
        while not stop() and time.monotonic() < deadline:
            time.sleep(min(0.1, pause))


def run_policy(queue: str) -> dict[str, Any]:
    """What a listener applies to a run of ``queue``: its settings' policy, limits,
    admission (MAX_RUNNING...) and lease, and the limits its @blueque_task gives (over its
    queue's)."""
    conf = get_settings()
    registered = registered_tasks().get(queue)
    return {**conf.policy(queue), **conf.limits(queue), **conf.admission(queue),
            **conf.lease(queue),
            **(registered.limits if registered else {})}


def build_listener(queues, concurrency=None, burst=False, max_tasks=None, duties=False):
    """A ForkingRunner on ``queues`` running the registered functions. With ``duties`` the
    listener also runs the scheduler and the reaper (enough for a one-machine deployment).
    Each run is observed (observability.py) and its log records name it (logs.py)."""
    conf = get_settings()
    install_task_context()
    periodic_duties = None
    if duties:
        reaper = ReaperLoop(lambda actions: [reaper_logger.info("%s", action)
                                             for action in actions])

        def periodic_duties():
            # each duty on its own: a failing scheduler pass must not keep the reaper from
            # running, nor the other way round
            for name, duty in (("scheduler", schedule_once), ("reaper", reaper)):
                try:
                    duty()
                except redis.RedisError:
                    raise
                except Exception:
                    logger.exception("listener: the %s pass failed", name)

    return ForkingRunner(
        get_client(), queues, run_task, concurrency or conf.concurrency, burst=burst,
        max_tasks=max_tasks, kill_grace=conf.kill_grace, policy=run_policy,
        duties=periodic_duties, duties_interval=conf.scheduler_interval,
        before_fork=close_connections_before_fork, on_task_end=task_ended,
        around_task=observed_run)
