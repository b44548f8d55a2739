"""Plumbing for bench/run.py: the private Redis, the peers' virtualenvs, child processes that
cannot outlive the harness, and the two figures read from outside a listener (commands, RSS)."""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import venv
from contextlib import contextmanager
from pathlib import Path

import redis

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """preexec_fn: Linux sends the child SIGTERM if the harness dies without cleaning up."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop(proc, grace=5.0):
    """SIGTERM (the graceful stop of every listener here), then SIGKILL its whole group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()


def _kill_group(pid):
    """SIGKILL the process group pid leads (a listener and its forks), or pid alone."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        os.kill(pid, signal.SIGKILL)


@contextmanager
def child(argv, **popen_kwargs):
    """A subprocess that is stopped when the block exits, by error or Ctrl-C included."""
    proc = subprocess.Popen(argv, preexec_fn=_die_with_parent, **popen_kwargs)
    try:
        yield proc
    finally:
        stop(proc)


class DriverError(RuntimeError):
    """A driver role failed; the message is the last line it wrote to stderr."""


def run_json(argv, timeout):
    """Run one driver role to the end and return the JSON object on its last stdout line
    (``argv``'s numbers are passed as their text)."""
    with child([str(arg) for arg in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
               text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DriverError(f"no answer within {timeout:.0f} s") from None
    if proc.returncode:
        lines = err.strip().splitlines()
        raise DriverError(lines[-1] if lines else f"exited with status {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def _free_port():
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port != 6379:  # never the default port, where someone's real Redis may live
            return port


@contextmanager
def private_redis(workdir):
    """A throwaway redis-server on a free loopback port, no persistence; yields its URL."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = _free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
            "no", "--dir", str(workdir), "--daemonize", "no", "--loglevel", "warning"]
    # Its own session, so Ctrl-C reaches the harness but not Redis, which must outlive the
    # listeners being stopped.
    with child(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
               start_new_session=True) as proc:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {port} did not start") from None
                time.sleep(0.02)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"


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


def command_rates(url, seconds):
    """Commands per second Redis executed during `seconds` (by command), and the connections.

    Call it only while the listener under test is the sole other client. Our own first INFO is
    counted by the second one, so one `info` call is taken off.
    """
    client = redis.Redis.from_url(url)
    before = client.info("commandstats")
    start = time.monotonic()
    time.sleep(seconds)
    after = client.info("commandstats")
    elapsed = time.monotonic() - start
    connections = client.info("clients")["connected_clients"] - 1
    client.close()
    calls = {key.removeprefix("cmdstat_"): stat["calls"] - before.get(key, {}).get("calls", 0)
             for key, stat in after.items()}
    calls["info"] -= 1
    return {cmd: n / elapsed for cmd, n in calls.items() if n}, connections


def _children_by_parent():
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    return children


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
    children = _children_by_parent()
    todo, total, count = [pid], 0, 0
    while todo:
        current = todo.pop()
        total += _pss_kb(current)
        count += 1
        todo.extend(children.get(current, []))
    return total, count
