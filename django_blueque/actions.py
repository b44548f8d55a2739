"""What the admin changes: each action is a protocol operation (the same effect a blueque 1.0
reader understands), guarded against the task having moved on since the page was shown, and
logged with the user who asked on the ``django_blueque.admin`` logger.

Bulk actions on a whole list (retry all failed, delete all complete or failed) are the engine's
bulk jobs (core/bulk.py: recorded in Redis, run in batches, resumed from any process); this
module adds who may run them and logs who started or stopped one.
"""

import logging
from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from .conf import get_client, get_settings
from .core import bulk
from .core import keys as k

logger = logging.getLogger("django_blueque.admin")

PERMISSIONS = {
    "view": "django_blueque.view_tasks",
    "retry": "django_blueque.retry_tasks",
    "cancel": "django_blueque.cancel_tasks",
    "delete": "django_blueque.delete_tasks",
}


# Each action returns DONE, SKIPPED (the task's status does not allow it) or TOO_DEEP (the
# task is further than protocol_admin.UNLIST_WINDOW from both ends of a long list: left alone).
DONE, SKIPPED, TOO_DEEP = 1, 0, -1


def _retry(client, task_id, queue, user):
    return client.protocol.admin.retry(queue, task_id)


def _run_now(client, task_id, queue, user):
    return DONE if client.protocol.admin.run_now(queue, task_id) else SKIPPED


def _cancel(client, task_id, queue, user):
    # 'cancelled' (it was waiting), 'requested' (running: its listener stops it), or a status
    return DONE if client.cancel(task_id) in ("cancelled", "requested") else SKIPPED


def _mark_failed(client, task_id, queue, user):
    """Fail the current run (guarded by its lease token, if any), without retry: the end its
    listener would have recorded. A process still running it loses its lease and stops."""
    node, pid, lease = client.redis.hmget(client.keys.task(task_id), "node", "pid", "lease")
    outcome = client.protocol.finish(
        queue, task_id, listener_id=node or "", pid=pid or "", token=lease or "",
        outcome=k.FAILED, value=f"marked failed by {user} from the admin",
        error_type="MarkedFailed", retryable=False, policy=get_settings().policy(queue))
    return DONE if outcome == "failed" else SKIPPED


def _start_over(client, task_id, queue, user):
    """Clear the task's checkpoint (refused while a run holds it), then retry it if failed:
    its next run begins from nothing."""
    if not client.protocol.admin.clear_checkpoint(task_id):
        return SKIPPED
    return TOO_DEEP if client.protocol.admin.retry(queue, task_id) == TOO_DEEP else DONE


def _delete(client, task_id, queue, user):
    """The protocol's delete (DEL task; LREM complete|failed), if the task is still finished."""
    return client.protocol.admin.delete_finished(queue, task_id)


@dataclass(frozen=True)
class TaskAction:
    """An action on chosen tasks: who may run it, on which statuses, and how it is said."""

    name: str
    permission: str
    statuses: tuple
    label: str | Promise  # translated lazily
    question: str | Promise
    run: object

    def applies_to(self, status):
        return status in self.statuses


TASK_ACTIONS = {action.name: action for action in (
    TaskAction("retry", PERMISSIONS["retry"], (k.FAILED,), _("Retry"),
               _("Put these failed tasks back in their queue, to be taken next?"), _retry),
    TaskAction("start_over", PERMISSIONS["retry"], (k.FAILED, k.PENDING, k.SCHEDULED),
               _("Start over"),
               _("Clear the checkpoints of these tasks, so that their next run begins from "
                 "nothing? Failed ones go back to their queue."), _start_over),
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


def is_cancelled(error_type):
    """Whether a failed task's error_type says it was cancelled (old unqualified name too)."""
    return error_type in k.CANCELLED_TYPES


def run_task_action(action, states, user):
    """Run ``action`` on each task of ``states`` ({id: (status, queue)}) it applies to.
    Returns (ids done, ids skipped, ids too deep in a long list to act on one by one)."""
    client = get_client()
    done, skipped, deep = [], [], []
    username = user.get_username()
    for task_id, (status, queue) in states.items():
        if not action.applies_to(status) or not k.valid_name(queue):
            skipped.append(task_id)
            continue
        outcome = action.run(client, task_id, queue, username)
        if outcome == DONE:
            done.append(task_id)
            logger.info("%s: %s task %s of queue %s (was %s)", username, action.name, task_id,
                        queue, status)
        else:
            (deep if outcome == TOO_DEEP else skipped).append(task_id)
    return done, skipped, deep


def requeue_listener(queue, listener_id, user):
    """Release a dead listener from a queue: its reserved tasks that had not started go back
    to the queue; started ones are left to the reaper, which fails or retries them once their
    lease expires. Returns (requeued ids, started ids), or None if it was already released."""
    client = get_client()
    released = client.protocol.release_listener(listener_id, queue)
    if released is None:
        return None
    client.protocol.forget_listener(listener_id, [queue])
    logger.info("%s: released listener %s of queue %s, requeued %d task(s): %s",
                user.get_username(), listener_id, queue, len(released[0]),
                " ".join(released[0]))
    return released


# -- bulk jobs (the engine's: core/bulk.py) ------------------------------------------------------

def bulk_permission(action):
    return PERMISSIONS[action]  # retry, delete or cancel


def start_bulk(action, state, queue, user, with_cancelled=False):
    """Start retrying or deleting every task of a queue's list, or cancelling every pending
    one; False if already running. A retry leaves cancelled tasks failed unless
    ``with_cancelled``."""
    started = bulk.start_job(get_client(), action, state, queue, user.get_username(),
                             with_cancelled)
    if started:
        logger.info("%s: started bulk job: %s every %s task of queue %s", user.get_username(),
                    action, state, queue)
    return started


def step_bulk(action, state, queue, budget=bulk.BULK_BUDGET):
    """Run batches of a job for up to ``budget`` seconds; returns the step's
    (status, processed, total, affected)."""
    return bulk.step_job(get_client(), action, state, queue, budget)


def stop_bulk(action, state, queue, user):
    stopped = bulk.stop_job(get_client(), action, state, queue)
    if stopped:
        logger.info("%s: stopped bulk job: %s every %s task of queue %s", user.get_username(),
                    action, state, queue)
    return stopped
