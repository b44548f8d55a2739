"""The fork server (fork_server.py, issue 17): the listener's task processes are forked by a
process it forked once, and nothing is lost or run twice when that process is killed, stopped,
or outlives its listener. Real runner processes, real signals, a real redis-server."""

import json
import os
import signal
import sys
import time

import pytest

from django_blueque.core.fork_server import _wait_status
from tests.core.helpers import children_of, fork_server_of, pid_alive, wait_for

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux only")


def job(**todo):
    return json.dumps(todo)


def runs_of(r, task_id):
    return [run for run in map(json.loads, r.lrange("core_test_runs", 0, -1))
            if run["id"] == task_id]


def parent_of(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("PPid:")).split()[1])


def state_of(pid):
    """The process's state letter (R, S, Z...), None once it is gone (reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return None


def server_of(runner, other_than=None):
    """The listener's fork server, once it forked the spare (not ``other_than``, one that
    died)."""
    def found():
        server = fork_server_of(runner.pid)
        return server if server != other_than and children_of(server) else None
    return wait_for(found, 20, runner.describe)


def ended(client, r, task_id, runner, attempts=1):
    """The task completed, on attempt ``attempts``, having run that many times."""
    task = wait_for(lambda: (lambda t: t if t.status in ("complete", "failed") else None)(
        client.get_task(task_id)), 60, runner.describe)
    assert (task.status, task.attempts) == ("complete", attempts), (task.fields,
                                                                      runner.output())
    assert len(runs_of(r, task_id)) == attempts, runner.output()
    return task


def test_the_listeners_task_processes_come_from_its_fork_server(client, r, start_runner):
    runner = start_runner()
    server = server_of(runner)
    task_id = client.get_queue("q").enqueue(job(sleep=2))
    pid = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)[0]["pid"]
    assert parent_of(pid) == server
    assert children_of(runner.pid) == [server]  # the listener forked nothing else
    ended(client, r, task_id, runner)


def test_without_the_fork_server_the_listener_forks_its_task_processes(client, r,
                                                                          start_runner):
    runner = start_runner(no_fork_server=True)
    task_id = client.get_queue("q").enqueue(job(sleep=2))
    pid = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)[0]["pid"]
    assert parent_of(pid) == runner.pid
    ended(client, r, task_id, runner)


def test_a_fork_server_killed_loses_and_repeats_nothing(client, r, start_runner):
    """Its running task is adopted by the listener, which records its end; the next tasks
    run in processes the listener forks, until a new server starts."""
    runner = start_runner(server_restart_pause=5)
    server = server_of(runner)
    queue = client.get_queue("q")
    task_id = queue.enqueue(job(sleep=3))
    pid = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)[0]["pid"]
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: f"fork server {server} exited" in runner.output(), 10, runner.describe)
    assert parent_of(pid) == runner.pid  # adopted: its subreaper
    ended(client, r, task_id, runner)
    for _ in range(3):
        task_id = queue.enqueue(job(sleep=0.5))
        pid = wait_for(lambda t=task_id: runs_of(r, t), 20, runner.describe)[0]["pid"]
        assert parent_of(pid) == runner.pid  # forked there
        ended(client, r, task_id, runner)
    time.sleep(5)  # SERVER_RESTART_PAUSE on, the next spare comes from a new server
    ended(client, r, queue.enqueue(job()), runner)
    new = server_of(runner, other_than=server)
    task_id = queue.enqueue(job(sleep=1))
    pid = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)[0]["pid"]
    assert parent_of(pid) == new
    ended(client, r, task_id, runner)


def only_its_own_spare(runner):
    """The listener's children, once the processes of its dead server are gone: the spare it
    forked itself, alive (no zombie left, none stranded)."""
    kids = children_of(runner.pid)
    return len(kids) == 1 and state_of(kids[0]) not in (None, "Z")


@pytest.mark.parametrize("where, first_task", [
    # its second fork (the first task's spare is the first): the spare forked then never
    # reaches the listener; it exits at the end of its socket (the server held the other
    # end), and the listener, its subreaper, reaps it
    ({"server_dies_after_fork": 2}, job(sleep=0.5)),
    # the first task's exit reported, its process not reaped: the listener reads that exit
    # twice (the server's word, then the zombie it adopts), and counts it once
    ({"server_dies_before_reaping": True}, job()),
], ids=["between-a-fork-and-its-reply", "between-an-exit-and-its-reaping"])
def test_a_fork_server_killed_midway_strands_and_repeats_nothing(client, r, start_runner,
                                                                 where, first_task):
    runner = start_runner(**where)
    server = server_of(runner)
    queue = client.get_queue("q")
    ended(client, r, queue.enqueue(first_task), runner)
    wait_for(lambda: f"fork server {server} " in runner.output(), 10,
             runner.describe)  # exited, or is gone (its socket's end read first)
    wait_for(lambda: only_its_own_spare(runner), 10, runner.describe)
    for _ in range(2):
        ended(client, r, queue.enqueue(job()), runner)
    assert "Traceback" not in runner.output()


def died(client, task_id, runner):
    """The task failed as its process died: killed by SIGKILL, its listener read."""
    task = wait_for(lambda: (lambda t: t if t.status == "failed" else None)(
        client.get_task(task_id)), 30, runner.describe)
    assert task.error.startswith("process killed by signal 9"), task.fields
    assert task.error_type == "ProcessDied"


def test_a_process_killed_after_its_fork_server_died_is_recorded(client, r, start_runner):
    """Its exit status is the listener's to read then (its subreaper): not stranded."""
    runner = start_runner()
    server = server_of(runner)
    task_id = client.get_queue("q").enqueue(job(wait_for="gate"))
    pid = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)[0]["pid"]
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: parent_of(pid) == runner.pid, 10, runner.describe)
    os.kill(pid, signal.SIGKILL)
    died(client, task_id, runner)


def test_a_process_killed_is_reported_by_its_fork_server(client, r, start_runner):
    runner = start_runner()
    server = server_of(runner)
    task_id = client.get_queue("q").enqueue(job(wait_for="gate"))
    pid = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)[0]["pid"]
    assert parent_of(pid) == server
    os.kill(pid, signal.SIGKILL)
    died(client, task_id, runner)
    assert pid_alive(server)
    assert f"fork server {server}" not in runner.output()


def test_a_stopped_fork_server_is_replaced_by_the_listeners_own_forks(client, r, start_runner):
    runner = start_runner()
    server = server_of(runner)
    os.kill(server, signal.SIGSTOP)
    queue = client.get_queue("q")
    for _ in range(3):
        ended(client, r, queue.enqueue(job()), runner)
    output = runner.output()
    assert f"fork server {server} owed an answer" in output or (
        f"fork server {server} sent no spare" in output), output
    wait_for(lambda: not pid_alive(server), 10, runner.describe)  # killed, reaped


def test_a_stopped_fork_server_owes_the_exit_of_a_task_that_ended(client, r, start_runner):
    """Its process exits unreaped. Its slot is free from its end (recorded, the socket closed
    on its way out): the next task runs in the spare meanwhile. The listener then lets the
    server go, reaps the process (its subreaper) and goes on."""
    runner = start_runner()
    server = server_of(runner)
    queue = client.get_queue("q")
    first = queue.enqueue(job(wait_for="gate"))
    first_pid = wait_for(lambda: runs_of(r, first), 20, runner.describe)[0]["pid"]
    wait_for(lambda: len(children_of(server)) == 2, 20, runner.describe)  # and the next spare
    time.sleep(0.2)  # its socket on its way to the listener
    os.kill(server, signal.SIGSTOP)
    r.set("gate", 1)
    second = queue.enqueue(job())
    wait_for(lambda: runs_of(r, second), 20, runner.describe)
    assert state_of(first_pid) == "Z", runner.output()  # exited, its server owes its exit
    ended(client, r, first, runner)
    ended(client, r, second, runner)
    wait_for(lambda: f"fork server {server} owed an answer" in runner.output() or (
        f"fork server {server} sent no spare" in runner.output()), 10, runner.describe)
    wait_for(lambda: state_of(first_pid) is None, 10, runner.describe)  # reaped


def test_the_fork_server_dies_with_its_listener(client, r, start_runner):
    """And the running task, orphaned, records its own end."""
    runner = start_runner()
    server = server_of(runner)
    task_id = client.get_queue("q").enqueue(job(sleep=2))
    wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    runner.signal(signal.SIGKILL)
    wait_for(lambda: not pid_alive(server), 10, runner.describe)
    ended(client, r, task_id, runner)


@pytest.mark.parametrize("end", ["exit 0", "exit 3", "SIGKILL", "SIGTERM", "SIGSEGV"])
def test_the_exit_status_it_reports_is_the_one_waitpid_reads(end):
    """A process that ends so (spawned, not forked from this multi-threaded test process)."""
    how = (f"os._exit({end.split()[1]})" if end.startswith("exit")
           else f"os.kill(os.getpid(), signal.{end})")
    code = ("import os, resource, signal; "
            "resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); "  # no core file left behind
            + how)
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", code], os.environ)
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    assert _wait_status(info) == os.waitpid(pid, 0)[1]
