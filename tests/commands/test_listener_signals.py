"""bq_listen's signals, as an operator and a terminal send them (issue 9, signal hygiene): a
second SIGHUP, and the reloading parent that DEBUG turns on (SIGHUP, Ctrl-C, SIGKILL)."""

import os
import signal
import subprocess
import sys
import time

from demo.tasks import long_task

from django_blueque import get_result
from tests.core.helpers import children_of
from tests.django_app.conftest import MANAGE, wait_for


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def start_reloading(manage):
    """bq_listen --reload in a session of its own, as a terminal's foreground job is."""
    process = subprocess.Popen([sys.executable, str(MANAGE), "bq_listen", "demo.long",
                                "--reload"], env=manage.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    manage.processes.append(process)
    listener = wait_for(lambda: children_of(process.pid), message="the listener child")[0]
    return process, listener


def test_two_sighups_restart_once_and_do_not_stop_at_once(manage, blueque, r):
    running = long_task.enqueue(steps=20, delay=0.1)
    listener = manage.start("bq_listen", "demo.long", "--noreload")
    wait_for(lambda: get_result(running).status == "started", message="task start")
    listener.send_signal(signal.SIGHUP)
    time.sleep(1)  # two signals sent at once would merge into one pending signal
    listener.send_signal(signal.SIGHUP)
    assert get_result(running).wait(timeout=30).status == "complete"
    after = long_task.enqueue(steps=1, delay=0)
    assert get_result(after).wait(timeout=30).status == "complete"
    assert listener.poll() is None  # re-executed, not exited 1
    listener.terminate()
    output, _ = listener.communicate(timeout=20)
    assert output.count("started on demo.long") == 2
    assert output.count("SIGHUP received: restarting with fresh code once the running "
                        "tasks end") == 1  # said once, when it began


def test_reloader_restarts_on_sighup_and_survives(manage, blueque, r):
    """Before: SIGHUP killed the reloader and left its listener running as an orphan."""
    reloader, listener = start_reloading(manage)
    first = wait_for(lambda: r.smembers("blueque_listeners_demo.long"), message="registration")
    reloader.send_signal(signal.SIGHUP)
    wait_for(lambda: (r.smembers("blueque_listeners_demo.long") or first) != first,
             message="a new registration after the restart")
    assert reloader.poll() is None  # the reloader lives on, with a new listener
    task_id = long_task.enqueue(steps=1, delay=0)
    assert get_result(task_id).wait(timeout=30).status == "complete"


def test_ctrl_c_under_the_reloader_is_a_graceful_stop(manage, blueque, r):
    """Before: the terminal's SIGINT reached the child, then the parent sent SIGTERM: two
    stops, so a running task was abandoned at once."""
    running = long_task.enqueue(steps=20, delay=0.1)
    reloader, listener = start_reloading(manage)
    wait_for(lambda: get_result(running).status == "started", message="task start")
    os.killpg(reloader.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
    assert reloader.wait(30) == 0
    assert get_result(running).status == "complete"  # waited for, not abandoned


def test_the_listener_dies_with_its_killed_reloader(manage, blueque, r):
    reloader, first = start_reloading(manage)
    registered = wait_for(lambda: r.smembers("blueque_listeners_demo.long"),
                          message="registration")
    reloader.kill()
    reloader.wait(10)
    # every listener it ran (the first child, and another if it restarted it meanwhile: the
    # pid ends each registered id)
    listeners = {first, *(int(listener_id.rpartition("_")[2]) for listener_id in registered)}
    wait_for(lambda: not any(map(alive, listeners)), timeout=20,
             message="the orphaned listener to exit")
    # it unregistered, a clean stop (no reaper runs here: nothing else would unregister it)
    listed = "blueque_listeners_demo.long"
    wait_for(lambda: not r.smembers(listed), timeout=20,
             message=lambda: f"every listener to unregister: {r.smembers(listed)}")
