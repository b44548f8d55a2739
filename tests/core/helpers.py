"""Plain helpers for the engine tests: waiting, real processes, and what Redis was sent."""

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from devtools.process_tree import sigkill
from devtools.servers import wait_for  # noqa: F401  (re-exported)

REPO = Path(__file__).resolve().parents[2]

SHORT_TIMINGS = {"lease": 3, "heartbeat": 3, "confirm": 2, "retry": 0.5, "handover": 0.5}
"""The liveness rules at a 3 s lease (recovered 5 s after its last renewal), for the fault
tests; Timings' keyword arguments (``Runner(..., timings=json.dumps(SHORT_TIMINGS))``)."""


def pid_alive(pid):
    """True if the process exists and is not a zombie (PID 1 here does not reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def children_of(pid):
    """The pids of a process's children (none once it has gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            return [int(child) for child in listing.read().split()]
    except FileNotFoundError:
        return []


def task_processes_of(pid):
    """The task processes of a listener: its children."""
    return children_of(pid)


def command_calls(r):
    """{command: calls} the server has executed, not counting INFO (how the tests read these)
    nor the handshake of a new connection (HELLO, CLIENT SETINFO)."""
    calls = {}
    for name, stats in r.info("commandstats").items():
        command = name.removeprefix("cmdstat_")
        if command not in ("info", "hello") and not command.startswith("client|"):
            calls[command] = stats["calls"]
    return calls


def requests_received(r):
    """Requests the server has read from its clients (INFO stats total_reads_processed, the
    read of this INFO included). commandstats and total_commands_processed also count the
    commands a Lua script runs, so a single heartbeat script would look like ten commands."""
    return r.info("stats")["total_reads_processed"]


def calls_delta(before, after):
    return {name: after[name] - before.get(name, 0) for name in after
            if after[name] != before.get(name, 0)}


def assert_time_field(value, low, high):
    """A time written as blueque 1.0 writes it: repr() of a time.time() float, in [low, high]."""
    assert value == repr(float(value)), f"{value!r} is not repr() of a float"
    assert low <= float(value) <= high, f"{value} not in [{low}, {high}]"


def tagged_pids(tag):
    """Pids of live processes whose command line carries the tag (forked children inherit it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            continue
        if tag.encode() in argv and pid_alive(int(entry)):
            pids.append(int(entry))
    return pids


class Script:
    """runner_script.py as a real process, in its own session, its output in a log file."""

    def __init__(self, args, log_dir, tag, pythonpath=()):
        self.tag = tag
        self.log_path = Path(log_dir) / f"script-{uuid.uuid4().hex[:8]}.log"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, pythonpath), str(REPO)]))
        with open(self.log_path, "wb") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tests.core.runner_script", "--tag", tag, *args],
                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log,
                stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        self.pid = self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def output(self):
        return self.log_path.read_text(errors="replace")

    def describe(self):
        state = "running" if self.alive() else f"exited with {self.popen.returncode}"
        return f"--- pid {self.pid} ({state}) ---\n{self.output()}"

    def json_line(self, timeout=20):
        """The next line printed on stdout, as JSON."""
        line = self.popen.stdout.readline()
        if not line:
            self.popen.wait(timeout)
            raise AssertionError(f"the script printed nothing\n{self.describe()}")
        return json.loads(line)

    def signal(self, signum):
        os.kill(self.pid, signum)

    def wait(self, timeout):
        return self.popen.wait(timeout)


class Runner(Script):
    """A ForkingRunner in its own process (``runner_script.py run``)."""

    def __init__(self, url, queues, log_dir, tag, pythonpath=(), **options):
        args = ["run", url, ",".join([queues] if isinstance(queues, str) else queues)]
        for name, value in options.items():
            args += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])
        super().__init__(args, log_dir, tag, pythonpath)
        hello = self.json_line()
        self.listener_id = hello["listener_id"]
        assert hello["pid"] == self.pid

    def stop(self, timeout=30):
        """SIGTERM, then wait for the exit; returns the exit status."""
        if self.alive():
            self.signal(signal.SIGTERM)
        return self.wait(timeout)


def kill_tagged(tag):
    """SIGKILL every process carrying the tag: runners and the task processes they forked."""
    sigkill(tagged_pids(tag))
