"""The engine's processes, run for real by the tests (``python -m tests.core.runner_script``):

    run URL QUEUE[,QUEUE...] [--concurrency N] [--kill-grace S] [--retention S] [--duties S]
        A ForkingRunner with tests.core.callbacks.callback. Prints {"pid", "listener_id"} once,
        then blocks; SIGTERM stops it. Exit status 0 on a clean stop, 3 otherwise. --duties S runs
        enqueue_due_tasks() and a Reaper's pass every S seconds in the listener. --policy JSON
        gives every queue that policy; --slow-end makes on_task_end take 12 s; --cluster: URL
        names a node of a Redis Cluster; --timings JSON sets the client's Timings (e.g.
        {"lease": 3, "confirm": 2}); --block-seconds S sets Timings.block and --answer-grace S
        waiter.ANSWER_GRACE; --doomed-forks N makes the first N task processes exit at once;
        --linger S keeps the
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
import sys
import time

from django_blueque.core import Client, ForkingRunner, Timings, enqueue_due_tasks, reap, waiter
from django_blueque.core.maintenance import Reaper
from tests.core import callbacks


def _sleep_until(moment):
    time.sleep(max(0.0, moment - time.time()))


def run(args):
    timings = Timings(**json.loads(args.timings or "{}"),
                      **({"block": args.block_seconds} if args.block_seconds else {}))
    client = Client(args.url, cluster=args.cluster, timings=timings)
    callbacks.URL, callbacks.CLUSTER = args.url, args.cluster
    if args.answer_grace is not None:
        waiter.ANSWER_GRACE = args.answer_grace
    client_duties = None
    if args.duties:
        reaper = Reaper(client.protocol)

        def client_duties():
            enqueue_due_tasks(client)
            reaper.reap()
    policy = None
    if args.policy:
        def policy(queue):
            return json.loads(args.policy)
    runner = ForkingRunner(client, args.queues.split(","), callbacks.callback,
                           concurrency=args.concurrency, kill_grace=args.kill_grace,
                           retention=args.retention, policy=policy, duties=client_duties,
                           duties_interval=args.duties or 5.0,
                           on_task_end=(callbacks.slow_end if args.slow_end else
                                        callbacks.note_end if args.note_ends else None),
                           before_fork=_doomed_forks(args.doomed_forks))
    print(json.dumps({"pid": os.getpid(), "listener_id": runner.listener_id}), flush=True)
    clean = runner.run()
    time.sleep(args.linger)
    return 0 if clean else 3


def _doomed_forks(count):
    """A before_fork whose first ``count`` forks give a process that exits at once (status
    3), before it reads its task: a task process that dies at start (the listener pauses
    50 ms after such a fork, so that the process is gone before its task is handed over)."""
    if not count:
        return None
    forks = 0

    def before_fork():
        nonlocal forks
        forks += 1

    def after_in_child():
        if forks <= count:
            os._exit(3)

    def after_in_parent():
        if forks <= count:
            time.sleep(0.05)

    os.register_at_fork(after_in_child=after_in_child, after_in_parent=after_in_parent)
    return before_fork


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
    runner.add_argument("--timings", default=None,
                        help="the liveness timings, as JSON: Timings' keyword arguments")
    runner.add_argument("--block-seconds", type=int, default=None)
    runner.add_argument("--answer-grace", type=float, default=None)
    runner.add_argument("--linger", type=float, default=0.0,
                        help="seconds to live on after run() returns")
    runner.add_argument("--doomed-forks", type=int, default=0, metavar="N",
                        help="the first N task processes exit at once, before their task")
    runner.add_argument("--slow-end", action="store_true",
                        help="on_task_end sleeps 12 s, then RPUSHes the task id to 'ended'")
    runner.add_argument("--note-ends", action="store_true",
                        help="on_task_end RPUSHes '<id> <outcome>' to 'ended'")
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
