"""The engine's processes, run for real by the tests (``python -m tests.core.runner_script``):

    run URL QUEUE[,QUEUE...] [--concurrency N] [--kill-grace S] [--retention S] [--duties S]
        A ForkingRunner with tests.core.callbacks.callback. Prints {"pid", "listener_id"} once,
        then blocks; SIGTERM stops it. Exit status 0 on a clean stop, 3 otherwise. --duties S runs
        enqueue_due_tasks() and a Reaper's pass every S seconds in the listener. --policy JSON
        gives every queue that policy; --slow-end makes on_task_end take 12 s; --cluster: URL
        names a node of a Redis Cluster; --begin-wait S sets children.BEGIN_WAIT; --block-seconds S
        sets waiter.BLOCK_SECONDS and --answer-grace S waiter.ANSWER_GRACE; --answer-wait
        S sets channel.ANSWER_WAIT; --server-restart-pause S sets spares.SERVER_RESTART_PAUSE and
        --no-fork-server makes the listener fork its task processes itself;
        --server-dies-after-fork N and --server-dies-before-reaping kill the fork server at
        those points; --linger S keeps the
        process (and the runner object) alive S seconds after run() returns, as a program that
        embeds a runner goes on.
    reap URL --at T
        Waits until Unix time T, runs one reap(), prints its actions as JSON.
    enqueue-due URL --at T --until T2
        Calls enqueue_due_tasks() in a loop from time T to time T2; prints the ids it moved.

Every command takes --tag (ignored) so that the tests can find and kill its processes, forked
task processes included, by their command line.
"""

import argparse
import json
import logging
import os
import signal
import sys
import time

from django_blueque.core import (
    Client,
    ForkingRunner,
    channel,
    children,
    enqueue_due_tasks,
    fork_server,
    reap,
    spares,
    waiter,
)
from django_blueque.core.maintenance import Reaper
from tests.core import callbacks


def _sleep_until(moment):
    time.sleep(max(0.0, moment - time.time()))


def run(args):
    client = Client(args.url, cluster=args.cluster)
    callbacks.URL, callbacks.CLUSTER = args.url, args.cluster
    if args.begin_wait is not None:
        children.BEGIN_WAIT = args.begin_wait
    if args.server_restart_pause is not None:
        spares.SERVER_RESTART_PAUSE = args.server_restart_pause
    if args.answer_wait is not None:
        channel.ANSWER_WAIT = args.answer_wait
    if args.block_seconds is not None:
        waiter.BLOCK_SECONDS = args.block_seconds
    if args.answer_grace is not None:
        waiter.ANSWER_GRACE = args.answer_grace
    client_duties = None
    if args.duties:
        reaper = Reaper(client)

        def client_duties():
            enqueue_due_tasks(client)
            reaper.reap()
    policy = None
    if args.policy:
        def policy(queue):
            return json.loads(args.policy)
    if args.server_dies_before_reaping:
        fork_server.os = _ServerDiesBeforeReaping(os.getpid())
    runner = ForkingRunner(client, args.queues.split(","), callbacks.callback,
                           concurrency=args.concurrency, kill_grace=args.kill_grace,
                           retention=args.retention, policy=policy, duties=client_duties,
                           duties_interval=args.duties or 5.0,
                           on_task_end=callbacks.slow_end if args.slow_end else None,
                           fork_server=not args.no_fork_server,
                           before_fork=_server_dies_after_fork(args.server_dies_after_fork))
    print(json.dumps({"pid": os.getpid(), "listener_id": runner.listener_id}), flush=True)
    clean = runner.run()
    time.sleep(args.linger)
    return 0 if clean else 3


def _server_dies_after_fork(forks):
    """A before_fork that has the fork server SIGKILL itself right after its fork number
    ``forks``: between the fork and the message that passes the spare's socket."""
    if not forks:
        return None
    listener = os.getpid()
    count = 0

    def before_fork():
        nonlocal count
        if os.getpid() != listener:  # in the server (the listener forks it, and falls back)
            count += 1
            if count == forks:
                os.register_at_fork(
                    after_in_parent=lambda: os.kill(os.getpid(), signal.SIGKILL))
    return before_fork


class _ServerDiesBeforeReaping:
    """fork_server's ``os``: in the server, a blocking waitpid (the reaping of a process
    whose exit it just reported) SIGKILLs the server instead."""

    def __init__(self, listener):
        self._listener = listener

    def __getattr__(self, name):
        return getattr(os, name)

    def waitpid(self, pid, options):
        if os.getpid() != self._listener and options == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return os.waitpid(pid, options)


def run_reap(args):
    client = Client(args.url)
    _sleep_until(args.at)
    actions = reap(client)
    print(json.dumps([[a.queue, a.what, a.task_id, a.listener_id] for a in actions]))
    return 0


def run_enqueue_due(args):
    client = Client(args.url)
    _sleep_until(args.at)
    moved = []
    while time.time() < args.until:
        for ids in enqueue_due_tasks(client).values():
            moved += ids
    print(json.dumps(moved))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", default="")
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run")
    runner.add_argument("url")
    runner.add_argument("queues")
    runner.add_argument("--concurrency", type=int, default=1)
    runner.add_argument("--kill-grace", type=float, default=10.0)
    runner.add_argument("--retention", type=float, default=None)
    runner.add_argument("--duties", type=float, default=None)
    runner.add_argument("--policy", default=None, help="the queues' policy, as JSON")
    runner.add_argument("--cluster", action="store_true", help="a Redis Cluster's node URL")
    runner.add_argument("--begin-wait", type=float, default=None,
                        help="how long the next spare's fork waits for a handed task to begin")
    runner.add_argument("--block-seconds", type=int, default=None)
    runner.add_argument("--answer-grace", type=float, default=None)
    runner.add_argument("--answer-wait", type=float, default=None,
                        help="how long a task process waits for its listener to record its end")
    runner.add_argument("--linger", type=float, default=0.0,
                        help="seconds to live on after run() returns")
    runner.add_argument("--server-restart-pause", type=float, default=None)
    runner.add_argument("--no-fork-server", action="store_true",
                        help="the listener forks its task processes itself")
    runner.add_argument("--server-dies-after-fork", type=int, default=0, metavar="N",
                        help="the fork server SIGKILLs itself after its Nth fork, before "
                             "it sends the spare")
    runner.add_argument("--server-dies-before-reaping", action="store_true",
                        help="the fork server SIGKILLs itself after it reports an exit, "
                             "before it reaps the process")
    runner.add_argument("--slow-end", action="store_true",
                        help="on_task_end sleeps 12 s, then RPUSHes the task id to 'ended'")
    reaper = commands.add_parser("reap")
    reaper.add_argument("url")
    reaper.add_argument("--at", type=float, required=True)
    scheduler = commands.add_parser("enqueue-due")
    scheduler.add_argument("url")
    scheduler.add_argument("--at", type=float, required=True)
    scheduler.add_argument("--until", type=float, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    return {"run": run, "reap": run_reap, "enqueue-due": run_enqueue_due}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
