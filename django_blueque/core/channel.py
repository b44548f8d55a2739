"""The socket between a listener and one of its task processes (a socket pair made before the
fork), and what goes through it:

1. the listener writes the task (one JSON line; nothing, and the socket closed: the spare is
   not to run), maybe after a ROUSE (the task is coming);
2. the process writes one byte once the task's code runs, unless its end comes first (the
   listener forks its next spare then, see children.BEGIN_WAIT);
3. at the task's end, the process writes how it ended (one JSON line) and the listener records
   it with its own connection, then answers with the outcome.

Why 3: a forked process's first Redis command costs it more CPU than all the rest of a short
task (copy-on-write faults all through redis-py's connection code), so a process whose task is
short never opens a connection of its own. The end is never lost with the listener: without an
answer within ANSWER_WAIT (the listener gone or stopped, or Redis away from it), the process
records its end itself, as patiently as ever; and one run's end counts once, whoever records
it (finish.lua answers 'stale' to a second recording).
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from collections.abc import Callable
from typing import Any

BEGUN = b"."
ROUSE = b"+"
ROUSED_SECONDS = 0.002
"""A spare's task is on its way: its listener's peek just returned, with a take sent ahead
(take_ahead.py). The spare then polls its socket rather than sleep on it, for at most this
long, so that the task finds it awake: on an idle core, a process woken by a write took
0.1-0.2 ms to run."""
NOT_RECORDED = "-"
ANSWER_WAIT = 2.0
"""Seconds a task process waits for its listener to record its end before recording it
itself (a listener stopped, or blocked on a Redis that does not answer)."""
LARGEST_END = 64 * 1024
"""The longest end (result or traceback) a process sends to its listener: a longer one it
records itself, so that the listener never buffers a large value."""


def task_line(queue: str, token: str, task_id: str, fields: dict[str, Any]) -> bytes:
    """The line a listener writes to hand a task over (1. above); ``handed_task`` reads it."""
    return json.dumps({"queue": queue, "token": token, "id": task_id,
                       "fields": fields}).encode() + b"\n"


def handed_task(line: bytes) -> tuple[str, str, str, dict[str, Any]]:
    """The queue, token, task id and fields of a ``task_line``."""
    handed = json.loads(line)
    return handed["queue"], handed["token"], handed["id"], handed["fields"]


# -- the task process's side ------------------------------------------------------------------
# (writes with MSG_NOSIGNAL: a listener gone must be an error, not a SIGPIPE, whatever the task
# did with that signal)

def read_task(sock: socket.socket, on_rouse: Callable[[], object] | None = None) -> bytes:
    """The task the listener writes (a JSON line), or b'' if it closed the socket instead
    (the task is not to run): then the socket is closed here too. After a ROUSE, the socket
    is polled rather than slept on, for at most ROUSED_SECONDS, once ``on_rouse()`` returned
    if the task has not come with the ROUSE."""
    data = b""
    polled_until = 0.0
    while not data.endswith(b"\n"):
        if polled_until:
            try:
                chunk = sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.monotonic() >= polled_until:
                    polled_until = 0.0
                os.sched_yield()  # its listener may be on this core, on the task's way here
                continue
        else:
            chunk = sock.recv(1 << 16)
        if not chunk:
            if not data:
                sock.close()
            return data
        if not data and chunk.startswith(ROUSE):
            chunk = chunk.lstrip(ROUSE)
            if not chunk and on_rouse is not None:
                on_rouse()
            polled_until = time.monotonic() + ROUSED_SECONDS
        data += chunk
    return data


def say_begun(sock: socket.socket) -> None:
    """Tell the listener the task's code runs: it forks its next spare then."""
    try:
        sock.send(BEGUN, socket.MSG_NOSIGNAL)
    except OSError:
        pass  # the listener is gone: at the end, the process records its end itself


def ask_to_record(sock: socket.socket, end: dict[str, Any]) -> str | None:
    """Have the listener record the task's ``end`` (finish's arguments); returns the outcome
    it recorded, or None when the process must record it itself."""
    if not isinstance(end["value"], (str, int, float)):
        return None  # bytes: not for a JSON line
    message = json.dumps(end).encode() + b"\n"
    if len(message) > LARGEST_END:
        return None
    try:
        sock.sendall(message, socket.MSG_NOSIGNAL)
        answer = b""
        while not answer.endswith(b"\n"):
            if not select.select([sock], [], [], ANSWER_WAIT)[0]:
                return None
            chunk = sock.recv(256)
            if not chunk:
                return None
            answer += chunk
    except OSError:
        return None
    outcome = answer.decode(errors="replace").strip()
    return None if outcome == NOT_RECORDED else outcome


# -- the listener's side ----------------------------------------------------------------------

def rouse(sock: socket.socket) -> None:
    """Tell a spare its task is on its way (see ROUSED_SECONDS)."""
    try:
        sock.send(ROUSE, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
    except OSError:
        pass  # it died: the listener finds out as it reaps it


class Channel:
    """The listener's end of one task process's socket, once its task is written: waited on in
    the listener's select like a peek. ``record(end)`` records an end the process sent and
    returns the outcome, or None if it could not. ``last_word``: the answer to a recorded end
    is the last thing said on the socket (the process has no on_task_end to run after it,
    only its exit), so the listener closes its side as it answers, and the task's slot is free
    without waiting for the process to close its own."""

    __slots__ = ("sock", "begun", "inbox", "record", "last_word")

    def __init__(self, sock: socket.socket, record: Callable[[dict[str, Any]], str | None],
                 last_word: bool = False) -> None:
        self.sock, self.record, self.last_word = sock, record, last_word
        self.begun = False
        self.inbox = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def open(self) -> bool:
        return self.sock.fileno() != -1

    def settle(self) -> None:
        """Read what the process wrote: its code began, or its end (recorded and answered)."""
        try:
            data = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()  # the process exited (or closed it): nothing more will come
            return
        if not self.begun:  # its end may come first (see lease.LeaseKeeper.keep)
            self.begun = True
            if data.startswith(BEGUN):
                data = data[len(BEGUN):]
        self.inbox += data
        if len(self.inbox) > LARGEST_END:
            self.close()  # not what a task process sends: let it record its end itself
        elif self.inbox.endswith(b"\n"):
            try:
                end = json.loads(self.inbox)
            except ValueError:
                end = None
            self.inbox = b""
            outcome = self.record(end) if isinstance(end, dict) else None
            try:
                self.sock.sendall(f"{outcome or NOT_RECORDED}\n".encode(), socket.MSG_NOSIGNAL)
            except OSError:
                pass  # it gave up waiting (or died): it records its end itself
            if outcome and self.last_word:
                self.close()  # the answer stays readable on the process's side

    def close(self) -> None:
        self.sock.close()
