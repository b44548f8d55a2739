"""Run our ForkingRunner from the command line (this interpreter, this checkout on PYTHONPATH),
with the same task callback as bq1_script.py::

    python ours_script.py run-forking-runner URL QUEUE [--concurrency N]   -> blocks; SIGTERM stops
    python ours_script.py reserve-and-die URL QUEUE    -> {"listener": ..., "task": ...}

reserve-and-die plays a listener of ours that crashes between reserving a task and starting it:
it registers, reserves one task with blueque 1.0's Listener API, and exits without a word.
"""

import argparse
import json
import os
import sys
import time

import redis

from django_blueque.core import Client, ForkingRunner

RUNS_KEY = "interop_runs"  # RPUSH "<worker> <task id> <pid>" each time a callback runs


def callback_directives(parameters):
    """{"sleep": seconds, "fail": bool} when the parameters are a JSON object, else {}."""
    try:
        value = json.loads(parameters)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def make_callback(url, worker):
    def callback(task):
        runs = redis.Redis.from_url(url)
        runs.rpush(RUNS_KEY, f"{worker} {task.id} {os.getpid()}")
        directives = callback_directives(task.parameters)
        time.sleep(float(directives.get("sleep", 0)))
        if directives.get("fail"):
            raise RuntimeError(f"{worker} failed on purpose")
        return f"{worker}:{task.parameters}"

    return callback


def main(argv=None):
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run-forking-runner")
    run.add_argument("url")
    run.add_argument("queue")
    run.add_argument("--concurrency", type=int, default=2)
    die = commands.add_parser("reserve-and-die")
    die.add_argument("url")
    die.add_argument("queue")
    args = parser.parse_args(argv)

    client = Client(args.url)
    if args.command == "reserve-and-die":
        listener = client.get_listener(args.queue)
        task = listener.listen()
        print(json.dumps({"listener": listener.id, "task": task.id}), flush=True)
        os._exit(0)  # no stop(), no start(): as if killed

    runner = ForkingRunner(client, args.queue, make_callback(args.url, "ours"),
                           concurrency=args.concurrency)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    runner.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
