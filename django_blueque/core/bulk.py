"""Bulk jobs: retrying or deleting every task of a queue's failed (or complete) list, or
cancelling every pending task of a queue.

A job is recorded in Redis and run in batches by the protocol's ``bulk_start``, ``bulk_step``
and ``bulk_stop`` (bulk_start.lua, bulk_step.lua, bulk_stop.lua): one caller never runs one
for longer than a fraction of a second, a job resumes from any process after an interruption,
and tasks that arrive meanwhile are left alone. Whoever steps a job advances it: the admin's
page while it is open, and :func:`advance_jobs` from the reaper's loop otherwise.

The admin (django_blueque.actions) adds who may run them and logs who did.
"""

import logging
import time

import redis

from . import keys as k

logger = logging.getLogger("django_blueque.admin")  # the admin's jobs, on the admin's logger

BULK_BATCH = 500
"""Tasks per bulk step: one atomic script of a few milliseconds."""

BULK_BUDGET = 0.25
"""Seconds of bulk steps one request (or one reaper pass) runs at most."""

BULK_ACTIONS = (("retry", k.FAILED), ("delete", k.FAILED), ("delete", k.COMPLETE),
                ("cancel", k.PENDING))
"""The (action, list) pairs a bulk job runs."""

BULK_KEEP = 24 * 3600
"""Seconds a finished bulk job's record stays readable."""


def bulk_job_id(action, state, queue):
    """One job per action, list and queue: starting it twice shows the running one. (Never
    'running', which names the set of running jobs: see keys.bulk_running.)"""
    return f"{action}_{state}_{queue}"


def start_job(client, action, state, queue, user, with_cancelled=False):
    """Start retrying or deleting every task of a queue's list, recorded as started by
    ``user`` (a name); False if already running. A retry leaves cancelled tasks failed unless
    ``with_cancelled``."""
    return client.protocol.admin.bulk_start(bulk_job_id(action, state, queue), action, queue, state,
                                      user, BULK_KEEP, with_cancelled)


def step_job(client, action, state, queue, budget=BULK_BUDGET):
    """Run batches of a job for up to ``budget`` seconds; returns the step's
    (status, processed, total, affected)."""
    deadline = time.monotonic() + budget
    while True:
        reply = client.protocol.admin.bulk_step(bulk_job_id(action, state, queue), queue, state,
                                          BULK_BATCH, BULK_KEEP)
        if reply[0] != "running" or time.monotonic() >= deadline:
            return reply


def stop_job(client, action, state, queue):
    """Stop a running job between two batches; False if it was not running."""
    return client.protocol.admin.bulk_stop(bulk_job_id(action, state, queue), BULK_KEEP)


def advance_jobs(client, budget=BULK_BUDGET):
    """Advance every running bulk job, for up to ``budget`` seconds in all, so jobs finish
    with no page open. One SMEMBERS finds them (the set of running jobs, whatever the number
    of queues). Returns the number of running jobs found. Meant for the reaper's loop."""
    try:
        found = client.protocol.admin.running_bulk_jobs()
    except redis.ResponseError as exc:  # someone wrote the set with another type
        logger.warning("bulk jobs not advanced: %s", exc)
        return 0
    running = [job for job in (tuple(job_id.split("_", 2)) for job_id in sorted(found))
               if len(job) == 3 and job[:2] in BULK_ACTIONS and k.valid_name(job[2])]
    deadline = time.monotonic() + budget
    for action, state, queue in running:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            step_job(client, action, state, queue, left)
        except redis.ResponseError as exc:  # a key of the wrong type: the others go on
            logger.warning("bulk job %s not advanced: %s", bulk_job_id(action, state, queue),
                           exc)
    return len(running)
