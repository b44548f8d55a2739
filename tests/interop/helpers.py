"""Plain helpers for the interop tests: processes that are always stopped, polling, snapshots."""

import json
import os
import signal
import subprocess
from pathlib import Path

from devtools.servers import wait_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BQ1_SCRIPT = HERE / "bq1_script.py"
OURS_SCRIPT = HERE / "ours_script.py"
RUNS_KEY = "interop_runs"
TIMESTAMP_FIELDS = {"created", "updated"}


class Process:
    """A subprocess in its own session whose output goes to a log file."""

    def __init__(self, name, argv, log_dir, env=None):
        self.name = name
        self.log_path = Path(log_dir) / f"{name}.log"
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self.popen = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        self.pid = self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def output(self):
        return self.log_path.read_text(errors="replace")

    def first_json_line(self, timeout=10):
        """The first line of output that is a JSON object (the runners announce themselves)."""

        def found():
            for line in self.output().splitlines():
                if line.startswith("{"):
                    return json.loads(line)
            if not self.alive():
                raise AssertionError(f"{self.name} exited early:\n{self.output()}")
            return None

        return wait_for(found, timeout, lambda: f"{self.name} printed nothing:\n{self.output()}")

    def describe(self):
        state = "running" if self.alive() else f"exited with {self.popen.returncode}"
        return f"--- {self.name} (pid {self.pid}, {state}) ---\n{self.output()}"

    def stop(self, grace=10):
        """SIGTERM, wait up to grace seconds, then SIGKILL its whole process group; always reap."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.pid, signal.SIGKILL)  # task processes left in its group, if any
        except (ProcessLookupError, PermissionError):
            pass
        if self.alive():
            self.popen.wait(10)
        return self.popen.returncode


def run_json(argv, env=None, timeout=30):
    """Run a one-shot command and return the JSON it printed on its last stdout line."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(
            f"{argv} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def snapshot(raw, ids):
    """The whole database as plain data, task ids replaced by <id0>, <id1>... and the hash
    timestamps by "<float>" once checked to parse as floats. raw: a bytes (non-decoding) client."""
    names = {task_id.encode(): f"<id{n}>".encode() for n, task_id in enumerate(ids)}

    def norm(value):
        for task_id, name in names.items():
            value = value.replace(task_id, name)
        return value

    data = {}
    for key in raw.keys("*"):
        kind = raw.type(key).decode()
        if kind == "hash":
            content = {}
            for field, value in raw.hgetall(key).items():
                if field.decode() in TIMESTAMP_FIELDS:
                    float(value)
                    value = b"<float>"
                content[field] = norm(value)
        elif kind == "list":
            content = [norm(v) for v in raw.lrange(key, 0, -1)]
        elif kind == "set":
            content = sorted(norm(v) for v in raw.smembers(key))
        elif kind == "zset":
            content = [(norm(m), s) for m, s in raw.zrange(key, 0, -1, withscores=True)]
        else:
            content = raw.dump(key)
        data[norm(key)] = (kind, content)
    return data
