"""Drive the real blueque 1.0.1 from the command line (run by the interop venv's python).

Every subcommand prints one JSON document on stdout. The runner's task callback is the same as
ours_script.py's, driven by directives in the task's parameters (see `callback_directives`)::

    python bq1_script.py enqueue URL QUEUE PARAMETERS          -> {"id": ...}
    python bq1_script.py schedule URL QUEUE PARAMETERS ETA     -> {"id": ...}
    python bq1_script.py enqueue-due URL QUEUE                 -> {}
    python bq1_script.py delete URL QUEUE TASK_ID              -> {} or {"error": ..., "type": ...}
    python bq1_script.py get-task URL TASK_ID                  -> the Task's attributes
    python bq1_script.py run-forking-runner URL QUEUE          -> blocks; SIGTERM stops it

This file must only import the standard library and blueque: it runs outside the project.
"""

import argparse
import json
import os
import signal
import socket
import sys
import time

import redis
from blueque import Client
from blueque.forking_runner import ForkingRunner

RUNS_KEY = "interop_runs"  # RPUSH "<worker> <task id> <pid>" each time a callback runs
TASK_ATTRIBUTES = (
    "id", "status", "queue", "parameters", "result", "error", "node", "pid", "created", "updated",
)


def callback_directives(parameters):
    """{"sleep": seconds, "fail": bool} when the parameters are a JSON object, else {}."""
    try:
        value = json.loads(parameters)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def make_callback(url, worker):
    def callback(task):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the runner's handler is not ours
        runs = redis.StrictRedis.from_url(url)
        runs.rpush(RUNS_KEY, f"{worker} {task.id} {os.getpid()}")
        directives = callback_directives(task.parameters)
        time.sleep(float(directives.get("sleep", 0)))
        if directives.get("fail"):
            raise RuntimeError(f"{worker} failed on purpose")
        return f"{worker}:{task.parameters}"

    return callback


class StoppableForkingRunner(ForkingRunner):
    """blueque 1.0's runner, unchanged, but SIGTERM also kills the task process it waits for.

    1.0 has no SIGTERM handling and its task processes call setsid(), so a test that stopped the
    runner would leave the task process behind to write into the next test's database.
    """

    child = None

    def fork_task(self, task):
        self.child = super().fork_task(task)  # the child never returns from here
        return self.child

    def stop(self, signum, frame):
        if self.child:
            try:
                os.kill(self.child, signal.SIGKILL)
                os.waitpid(self.child, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os._exit(0)


def task_as_json(task):
    data = {name: getattr(task, name) for name in TASK_ATTRIBUTES}
    data["types"] = {name: type(value).__name__ for name, value in data.items()}
    return data


def main(argv=None):
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    for name, args in {
        "enqueue": ("url", "queue", "parameters"),
        "schedule": ("url", "queue", "parameters", "eta"),
        "enqueue-due": ("url", "queue"),
        "delete": ("url", "queue", "task_id"),
        "get-task": ("url", "task_id"),
        "run-forking-runner": ("url", "queue"),
    }.items():
        command = commands.add_parser(name)
        for arg in args:
            command.add_argument(arg)
    args = parser.parse_args(argv)
    client = Client(args.url)

    if args.command == "enqueue":
        output = {"id": client.get_queue(args.queue).enqueue(args.parameters)}
    elif args.command == "schedule":
        output = {"id": client.get_queue(args.queue).schedule(args.parameters, float(args.eta))}
    elif args.command == "enqueue-due":
        client.get_queue(args.queue).enqueue_due_tasks()
        output = {}
    elif args.command == "delete":
        try:
            client.get_queue(args.queue).delete_task(client.get_task(args.task_id))
            output = {}
        except Exception as exc:  # reported to the test, which decides
            output = {"error": str(exc), "type": type(exc).__name__}
    elif args.command == "get-task":
        output = task_as_json(client.get_task(args.task_id))
    else:
        runner = StoppableForkingRunner(client, args.queue, make_callback(args.url, "bq1"))
        signal.signal(signal.SIGTERM, runner.stop)
        # The id blueque's Listener will register (socket.getfqdn(), this pid), for the test.
        print(json.dumps({"listener": f"{socket.getfqdn()}_{os.getpid()}"}), flush=True)
        runner.run()
        return 1  # run() never returns

    print(json.dumps(output), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
