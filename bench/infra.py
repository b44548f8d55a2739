"""Plumbing for bench/run.py: the private Redis, the peers' virtualenvs, child processes that
cannot outlive the harness, and the two figures read from outside a listener (commands, RSS)."""

import json
import shutil
import subprocess
import sys
import time
import venv
from contextlib import contextmanager
from pathlib import Path

import redis

sys.path.append(str(Path(__file__).resolve().parents[1]))  # devtools, at this checkout's root
from devtools.process_tree import descendants, kill_all  # noqa: E402
from devtools.servers import die_with_parent, private_redis  # noqa: E402, F401 (re-exported)


def stop(proc, grace=5.0):
    """SIGTERM (the graceful stop of every listener here), then SIGKILL what is left of it and
    of every process it started, those it forked while it stopped included (its spare): a
    task process may have a session of its own, and outlives its listener while Redis, which
    the harness stops next, does not answer its end."""
    tree = descendants(proc.pid)
    if proc.poll() is None:
        proc.terminate()
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline:
            tree.update(descendants(proc.pid))  # children are lost to us once it exits
            time.sleep(0.05)
        if proc.poll() is None:
            tree.update(descendants(proc.pid))
            proc.kill()
            proc.wait()
    kill_all(tree)


@contextmanager
def child(argv, **popen_kwargs):
    """A subprocess that is stopped when the block exits, by error or Ctrl-C included."""
    proc = subprocess.Popen(argv, preexec_fn=die_with_parent, **popen_kwargs)
    try:
        yield proc
    finally:
        stop(proc)


class DriverError(RuntimeError):
    """A driver role failed; the message is the last line it wrote to stderr."""


def run_json(argv, timeout, env=None):
    """Run one driver role to the end and return the JSON object on its last stdout line
    (``argv``'s numbers are passed as their text; ``env``: its environment, if not ours)."""
    with child([str(arg) for arg in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
               text=True, env=env) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DriverError(f"no answer within {timeout:.0f} s") from None
    if proc.returncode:
        lines = err.strip().splitlines()
        raise DriverError(lines[-1] if lines else f"exited with status {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def ensure_venv(directory, requirement):
    """The python of a virtualenv holding `requirement` (pip requirements, separated by
    spaces), built once and reused afterwards.

    The stamp is written last, so an interrupted build is thrown away and redone.
    """
    python = directory / "bin" / "python"
    stamp = directory / "bench-requirement.txt"
    if python.exists() and stamp.exists() and stamp.read_text() == requirement:
        return python
    print(f"building {directory} with {requirement}", file=sys.stderr, flush=True)
    shutil.rmtree(directory, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(directory)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *requirement.split()], check=True)
    stamp.write_text(requirement)
    return python


class CommandCount:
    """Commands Redis executes from now until ``rates()`` (by command), and the connections
    then. Use it only while the listener under test is that Redis's sole other client."""

    def __init__(self, url):
        self.url = url
        with redis.Redis.from_url(url) as client:
            self.before = client.info("commandstats")
        self.start = time.monotonic()

    def rates(self):
        """Commands per second since the start, and the connections; our own first INFO is
        counted by the second one, so one ``info`` call is taken off."""
        with redis.Redis.from_url(self.url) as client:
            after = client.info("commandstats")
            elapsed = time.monotonic() - self.start
            connections = client.info("clients")["connected_clients"] - 1
        calls = {key.removeprefix("cmdstat_"): stat["calls"]
                 - self.before.get(key, {}).get("calls", 0) for key, stat in after.items()}
        calls["info"] -= 1
        return {cmd: n / elapsed for cmd, n in calls.items() if n}, connections


def _pss_kb(pid):
    """The process's proportional set size: its private pages plus its share of the pages it
    shares (a forked process shares most of its parent's), so summing over processes counts
    every page once, where VmRSS would count shared pages in each."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_pss_kb(pid):
    """PSS of a process plus its descendants (an engine may keep helpers), and how many."""
    tree = [pid, *descendants(pid)]
    return sum(map(_pss_kb, tree)), len(tree)
