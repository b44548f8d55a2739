"""The socket between a listener and a task process (channel.py), and when the process says its
task began (lease.LeaseKeeper): real socket pairs and a real thread, no Redis needed."""

import json
import socket
import threading
import time

import pytest

from django_blueque.core.channel import (
    BEGUN,
    NOT_RECORDED,
    ROUSE,
    ROUSED_SECONDS,
    Channel,
    read_task,
    rouse,
)
from django_blueque.core.context import RunningTask
from django_blueque.core.lease import LeaseKeeper
from django_blueque.core.task import Task

TASK = json.dumps({"queue": "q", "token": "t", "id": "i", "fields": {"attempts": "1"}}).encode()


def test_a_spare_roused_then_handed_its_task_reads_the_task_alone():
    listener, spare = socket.socketpair()
    with listener, spare:
        listener.sendall(ROUSE)
        listener.sendall(TASK + b"\n")
        assert read_task(spare) == TASK + b"\n"


def test_a_roused_spare_whose_task_comes_late_waits_for_it():
    """The polling after a ROUSE ends (a take sent ahead that found nothing): the spare then
    sleeps on its socket until the task comes."""
    listener, spare = socket.socketpair()
    with listener, spare:
        listener.sendall(ROUSE)
        later = threading.Timer(ROUSED_SECONDS * 50, lambda: listener.sendall(TASK + b"\n"))
        later.start()
        try:
            assert read_task(spare) == TASK + b"\n"
        finally:
            later.join()


def test_a_spare_roused_twice_apart_reads_the_task_alone():
    """Roused as its listener records the end of the task before it (more wait in its
    queue), its polling over, then roused again by the take sent ahead: each ROUSE comes
    first of what the spare reads, and the task comes clean."""
    listener, spare = socket.socketpair()
    with listener, spare:
        rouse(listener)

        def later():
            rouse(listener)
            listener.sendall(TASK + b"\n")

        timer = threading.Timer(ROUSED_SECONDS * 50, later)
        timer.start()
        try:
            assert read_task(spare) == TASK + b"\n"
        finally:
            timer.join()


@pytest.mark.parametrize("first, then, roused", [
    (ROUSE, TASK + b"\n", 1),  # its way walked again while its take runs
    (ROUSE + TASK + b"\n", b"", 0),  # the task came with the ROUSE: straight to it
    (TASK + b"\n", b"", 0),  # not roused (a task queued as the spare was forked)
], ids=["roused ahead", "roused with it", "not roused"])
def test_a_spare_roused_ahead_of_its_task_calls_on_rouse_once(first, then, roused):
    listener, spare = socket.socketpair()
    calls = []
    with listener, spare:
        listener.sendall(first)
        later = threading.Timer(ROUSED_SECONDS * 10, lambda: listener.sendall(then))
        later.start()
        try:
            assert read_task(spare, on_rouse=lambda: calls.append(len(calls))) == TASK + b"\n"
        finally:
            later.join()
    assert calls == list(range(roused))


def test_a_running_task_made_ahead_is_assigned_the_task_it_is_handed():
    """A task process builds its RunningTask before its task comes (task_process.py)."""
    running = RunningTask(None, Task("made-up", {"attempts": "1", "queue": "q"}), "t")
    running.assign(Task("id", {"attempts": "3", "queue": "its own"}), "token", 60.0, "taken")
    assert (running.id, running.task.id, running.attempt, running.token, running.timeout,
            running.queue) == ("id", "id", 3, "token", 60.0, "taken")
    running.assign(Task("next", {"queue": "its own"}), "token2")
    assert (running.id, running.attempt, running.timeout, running.queue) == (
        "next", 1, None, "its own")


def test_a_roused_spare_let_go_reads_nothing_and_closes_its_end():
    listener, spare = socket.socketpair()
    with listener:
        listener.sendall(ROUSE + ROUSE)
        listener.close()
        assert read_task(spare) == b""
        assert spare.fileno() == -1


def test_an_end_sent_before_the_task_is_said_to_have_begun_is_recorded():
    """The process says its task began from its lease thread, which may run only after the
    task's end was sent (a short task): the end is recorded all the same, and counts as
    begun."""
    ends = []
    listener, process = socket.socketpair()
    with process:
        channel = Channel(listener, lambda end: ends.append(end) or "complete")
        end = {"outcome": "complete", "value": "v"}
        process.sendall(json.dumps(end).encode() + b"\n")
        channel.settle()
        assert (ends, channel.begun) == ([end], True)
        assert process.recv(64) == b"complete\n"
        channel.close()


def test_an_end_sent_after_begun_is_recorded_without_the_begun_byte():
    ends = []
    listener, process = socket.socketpair()
    with process:
        channel = Channel(listener, lambda end: ends.append(end) or "complete")
        process.sendall(BEGUN)
        channel.settle()
        assert (ends, channel.begun) == ([], True)
        process.sendall(b'{"outcome": "failed"}\n')
        channel.settle()
        assert ends == [{"outcome": "failed"}]
        channel.close()


@pytest.mark.parametrize("last_word, outcome, still_open", [
    (True, "complete", False),  # no on_task_end: the slot frees as the listener answers
    (False, "complete", True),  # the process closes it, once its on_task_end has run
    (True, None, True),  # not recorded: the process records it itself, its slot held
])
def test_the_listener_closes_its_side_as_it_answers_when_that_is_the_last_word(
        last_word, outcome, still_open):
    listener, process = socket.socketpair()
    with process:
        channel = Channel(listener, lambda end: outcome, last_word=last_word)
        process.sendall(b'{"outcome": "complete"}\n')
        channel.settle()
        assert channel.open is still_open
        assert process.recv(64) == f"{outcome or NOT_RECORDED}\n".encode()
        process.setblocking(False)
        if still_open:
            with pytest.raises(BlockingIOError):
                process.recv(64)
            channel.close()
        else:
            assert process.recv(64) == b""  # the answer read, then the end of the socket


def _running():
    return RunningTask(None, Task("i", {"attempts": "1"}), "t")  # no renewal within the test


def test_the_lease_thread_says_begun_once_the_tasks_code_runs():
    """Said before the task's code (as it was), the listener's fork of its next spare took the
    task's core away just as the code began, one pickup in ten."""
    order = []
    keeper, running = LeaseKeeper(begun=lambda: order.append("begun")), _running()
    keeper.start()
    try:
        keeper.keep(running, (), own_process=False)
        order.append("the task's code")  # the thread waits for the interpreter's lock
        deadline = time.monotonic() + 5
        while len(order) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert order == ["the task's code", "begun"]
    finally:
        running.finished.set()
        keeper.join(5)


def test_the_lease_thread_says_nothing_of_a_task_whose_end_is_recorded():
    said = []
    keeper, running = LeaseKeeper(begun=lambda: said.append("begun")), _running()
    keeper.start()
    keeper.keep(running, (), own_process=False)
    running.finished.set()  # before the thread got the interpreter's lock
    keeper.join(5)
    assert not keeper.is_alive()
    assert said == []
