"""bq_listen's autoreload (issue 13, item 13): it says at start-up and on a change that running
tasks are waited for, and SIGHUP restarts it at once, the running task going on in its own
process. One Ctrl-C stops it gracefully."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from devtools.servers import wait_for
from tests.django_app.conftest import MANAGE

LISTENERS = "blueque_listeners_demo.long"


class Output:
    """A process's output, read by a thread."""

    def __init__(self, process):
        self.lines = []
        threading.Thread(target=lambda: self.lines.extend(process.stdout), daemon=True).start()

    def __str__(self):
        return "".join(self.lines)


@pytest.fixture
def watched(tmp_path, manage):
    """A module the listener imports at start (sitecustomize on PYTHONPATH): touching it is a
    code change."""
    folder = tmp_path / "watched"
    folder.mkdir()
    module = folder / "sitecustomize.py"
    module.write_text("# imported at start-up: the reloader watches it\n")
    manage.env["PYTHONPATH"] = str(folder)
    return module


def touch(path):
    later = time.time() + 5
    os.utime(path, (later, later))


@pytest.fixture
def task_pids(r):
    """Task processes to kill at the end (they outlive the listener restarted at once)."""
    pids = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_change_waits_for_running_tasks_and_sighup_restarts_at_once(manage, watched, r,
                                                                     task_pids):
    supervisor = manage.start("bq_listen", "demo.long", "--reload", "-c", "1")
    output = Output(supervisor)
    wait_for(lambda: f"To restart at once (running tasks finish in their own processes): "
                     f"kill -HUP {supervisor.pid}" in str(output), 30, lambda: str(output))
    first = wait_for(lambda: r.smembers(LISTENERS), 30, lambda: str(output))
    task_id = "reload-task"
    r.hset(f"blueque_task_{task_id}", mapping={
        "status": "pending", "queue": "demo.long", "created": time.time(),
        "updated": time.time(), "parameters": json.dumps({"steps": 600, "delay": 0.5})})
    r.lpush("blueque_pending_tasks_demo.long", task_id)
    wait_for(lambda: r.hget(f"blueque_task_{task_id}", "status") == "started", 30)
    task_pids.append(int(r.hget(f"blueque_task_{task_id}", "pid")))

    touch(watched)
    wait_for(lambda: f"{watched} changed: the listener restarts once its running tasks end"
             in str(output), 30, lambda: str(output))
    assert f"To restart now: kill -HUP {supervisor.pid}" in str(output)
    time.sleep(3)
    assert r.smembers(LISTENERS) <= first, "restarted without waiting for the running task"
    assert r.hget(f"blueque_task_{task_id}", "status") == "started"

    supervisor.send_signal(signal.SIGHUP)
    second = wait_for(lambda: r.smembers(LISTENERS) - first, 30, lambda: str(output))
    assert "SIGHUP: restarting the listener now." in str(output)
    assert r.hget(f"blueque_task_{task_id}", "status") == "started"
    os.kill(task_pids[0], 0)  # the task's process goes on

    supervisor.send_signal(signal.SIGINT)  # as Ctrl-C: graceful (the new listener is idle)
    assert supervisor.wait(30) == 0, str(output)
    assert not r.smembers(LISTENERS) & second


def test_one_ctrl_c_lets_the_running_task_finish(manage, watched, r):
    supervisor = subprocess.Popen(  # in its own session, as a terminal's foreground job
        [sys.executable, str(MANAGE), "bq_listen", "demo.long", "--reload", "-c", "1"],
        env=manage.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    manage.processes.append(supervisor)
    output = Output(supervisor)
    wait_for(lambda: r.smembers(LISTENERS), 30, lambda: str(output))
    r.hset("blueque_task_short", mapping={
        "status": "pending", "queue": "demo.long", "created": time.time(),
        "updated": time.time(), "parameters": json.dumps({"steps": 4, "delay": 1})})
    r.lpush("blueque_pending_tasks_demo.long", "short")
    wait_for(lambda: r.hget("blueque_task_short", "status") == "started", 30)
    os.killpg(supervisor.pid, signal.SIGINT)  # Ctrl-C: to the whole foreground group
    assert supervisor.wait(60) == 0, str(output)
    assert r.hget("blueque_task_short", "status") == "complete", str(output)
