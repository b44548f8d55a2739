"""What the admin changes: each action is a protocol operation (the same effect a blueque 1.0
reader understands), guarded against the task having moved on since the page was shown, and
logged with the user who asked on the ``django_blueque.admin`` logger.

Bulk actions on a whole list (retry all failed, delete all complete or failed) are jobs
recorded in Redis and run in batches (see bulk_start.lua and bulk_step.lua): a request never
runs one for longer than a fraction of a second, a job resumes from any process after an
interruption, and tasks that arrive meanwhile are left alone. Whoever polls the job's page
advances it, and so does :func:`advance_bulk_jobs`, meant for the reaper's loop.
"""

import logging
import time
from dataclasses import dataclass

import redis
from django.utils.translation import gettext_lazy as _

from .conf import get_client, get_settings
from .core import keys as k

logger = logging.getLogger("django_blueque.admin")

BULK_BATCH = 500
"""Tasks per bulk step: one atomic script of a few milliseconds."""

BULK_BUDGET = 0.25
"""Seconds of bulk steps one request (or one reaper pass) runs at most."""

BULK_ACTIONS = (("retry", k.FAILED), ("delete", k.FAILED), ("delete", k.COMPLETE))
BULK_KEEP = 24 * 3600
"""Seconds a finished bulk job's record stays readable."""

PERMISSIONS = {
    "view": "django_blueque.view_tasks",
    "retry": "django_blueque.retry_tasks",
    "cancel": "django_blueque.cancel_tasks",
    "delete": "django_blueque.delete_tasks",
}


def _retry(client, task_id, queue, user):
    return client.protocol.retry(queue, task_id)


def _run_now(client, task_id, queue, user):
    return client.protocol.run_now(queue, task_id)


def _cancel(client, task_id, queue, user):
    # 'cancelled' (it was waiting), 'requested' (running: its listener stops it), or a status
    return client.cancel(task_id) in ("cancelled", "requested")


def _mark_failed(client, task_id, queue, user):
    """Fail the current run (guarded by its lease token, if any), without retry: the end its
    listener would have recorded. A process still running it loses its lease and stops."""
    node, pid, lease = client.redis.hmget(client.keys.task(task_id), "node", "pid", "lease")
    outcome = client.protocol.finish(
        queue, task_id, node or "", pid or "", lease or "", k.FAILED,
        f"marked failed by {user} from the admin", error_type="MarkedFailed", retryable=False,
        default_retention=get_settings().policy(queue)["retention"])
    return outcome == "failed"


def _delete(client, task_id, queue, user):
    """The protocol's delete (DEL task; LREM complete|failed), only if the task is still
    finished when the transaction runs."""
    task_key = client.keys.task(task_id)
    with client.redis.pipeline() as pipe:
        try:
            pipe.watch(task_key)
            status = pipe.hget(task_key, "status")
            if status not in k.FINISHED:
                return False
            pipe.multi()
            pipe.delete(task_key)
            pipe.lrem(client.keys.finished(queue, status), 1, task_id)
            pipe.execute()
        except redis.WatchError:
            return False
    return True


@dataclass(frozen=True)
class TaskAction:
    """An action on chosen tasks: who may run it, on which statuses, and how it is said."""

    name: str
    permission: str
    statuses: tuple
    label: str
    question: str
    run: object

    def applies_to(self, status):
        return status in self.statuses


TASK_ACTIONS = {action.name: action for action in (
    TaskAction("retry", PERMISSIONS["retry"], (k.FAILED,), _("Retry"),
               _("Put these failed tasks back in their queue, to be taken next?"), _retry),
    TaskAction("run_now", PERMISSIONS["retry"], (k.SCHEDULED,), _("Run now"),
               _("Send these scheduled tasks to their queue now, to be taken next?"),
               _run_now),
    TaskAction("cancel", PERMISSIONS["cancel"], (k.SCHEDULED, k.PENDING, k.RESERVED, k.STARTED),
               _("Cancel"),
               _("Cancel these tasks? Waiting ones fail at once with the error 'cancelled'; "
                 "running ones are stopped by their listener within seconds."), _cancel),
    TaskAction("mark_failed", PERMISSIONS["cancel"], (k.RESERVED, k.STARTED),
               _("Mark failed"),
               _("Mark these tasks failed, without retry? Use it for a task whose process is "
                 "gone; a process still running one loses its lease and stops."),
               _mark_failed),
    TaskAction("delete", PERMISSIONS["delete"], k.FINISHED, _("Delete"),
               _("Delete these finished tasks? Their results and errors are lost."), _delete),
)}


def run_task_action(action, states, user):
    """Run ``action`` on each task of ``states`` ({id: (status, queue)}) it applies to.
    Returns (ids done, ids skipped)."""
    client = get_client()
    done, skipped = [], []
    username = user.get_username()
    for task_id, (status, queue) in states.items():
        if not action.applies_to(status) or not queue or not k.valid_name(queue):
            skipped.append(task_id)
            continue
        if action.run(client, task_id, queue, username):
            done.append(task_id)
            logger.info("%s: %s task %s of queue %s (was %s)", username, action.name, task_id,
                        queue, status)
        else:
            skipped.append(task_id)
    return done, skipped


def requeue_listener(queue, listener_id, user):
    """Release a dead listener from a queue: its reserved tasks that had not started go back
    to the queue; started ones are left to the reaper, which fails or retries them once their
    lease expires. Returns (requeued ids, started ids), or None if it was already released."""
    client = get_client()
    released = client.protocol.release_listener(listener_id, queue)
    if released is None:
        return None
    client.protocol.forget_listener(listener_id)
    logger.info("%s: released listener %s of queue %s, requeued %d task(s): %s",
                user.get_username(), listener_id, queue, len(released[0]),
                " ".join(released[0]))
    return released


# -- bulk jobs ------------------------------------------------------------------------------------

def bulk_job_id(action, state, queue):
    """One job per action, list and queue: starting it twice shows the running one."""
    return f"{action}_{state}_{queue}"


def bulk_permission(action):
    return PERMISSIONS["retry" if action == "retry" else "delete"]


def start_bulk(action, state, queue, user):
    """Start retrying or deleting every task of a queue's list; False if already running."""
    started = get_client().protocol.bulk_start(bulk_job_id(action, state, queue), action, queue,
                                               state, user.get_username(), BULK_KEEP)
    if started:
        logger.info("%s: started bulk job: %s every %s task of queue %s", user.get_username(),
                    action, state, queue)
    return started


def step_bulk(action, state, queue, budget=BULK_BUDGET, client=None):
    """Run batches of a job for up to ``budget`` seconds; returns the step's
    (status, processed, total, affected)."""
    client = client or get_client()
    deadline = time.monotonic() + budget
    while True:
        reply = client.protocol.bulk_step(bulk_job_id(action, state, queue), queue, state,
                                          BULK_BATCH, BULK_KEEP)
        if reply[0] != "running" or time.monotonic() >= deadline:
            return reply


def stop_bulk(action, state, queue, user):
    stopped = get_client().protocol.bulk_stop(bulk_job_id(action, state, queue), BULK_KEEP)
    if stopped:
        logger.info("%s: stopped bulk job: %s every %s task of queue %s", user.get_username(),
                    action, state, queue)
    return stopped


def advance_bulk_jobs(client=None, budget=BULK_BUDGET):
    """Advance every running bulk job, for up to ``budget`` seconds in all, so jobs finish
    with no page open. One round trip to find them (a HGET per queue and kind of job).
    Returns the number of running jobs found. Meant to be called by the reaper's loop."""
    client = client or get_client()
    queues = client.queue_names()
    jobs = [(action, state, queue) for queue in queues for action, state in BULK_ACTIONS]
    if not jobs:
        return 0
    with client.redis.pipeline(transaction=False) as pipe:
        for action, state, queue in jobs:
            pipe.hget(client.keys.bulk_job(bulk_job_id(action, state, queue)), "status")
        running = [job for job, status in zip(jobs, pipe.execute(), strict=True)
                   if status == "running"]
    deadline = time.monotonic() + budget
    for action, state, queue in running:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        step_bulk(action, state, queue, left, client)
    return len(running)
