"""Where the listener's spare task processes come from: its fork server (fork_server.py), on
Linux, or a fork of the listener itself, elsewhere and whenever the server fails (it sent no
spare in time, or died and was restarted less than SERVER_RESTART_PAUSE ago). A mixin of
ForkingRunner (runner.py), with children.py, whose state it shares."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from . import fork_server
from .fork_server import ForkServer
from .task_process import TaskProcess, describe_exit

if TYPE_CHECKING:
    from .children import Child
    from .maintenance import Policy
    from .protocol import Protocol
    from .task import Task
    from .wakeup import WakeupPipe

logger = logging.getLogger("django_blueque.listener")

SERVER_RESTART_PAUSE = 10.0
"""A fork server that died is started again at most this often: meanwhile the listener forks."""


class Spares:
    """ForkingRunner's source of spare task processes."""

    if TYPE_CHECKING:  # ForkingRunner's state, shared with this half
        _protocol: Protocol
        _callback: Callable[[Task], object]
        _before_fork: Callable[[], object] | None
        _on_task_end: Callable[[Task, str, Any, Any], object] | None
        listener_id: str
        policy: Policy
        burst: bool
        concurrency: int
        fork_server: bool
        children: dict[int, Child]
        _spare: tuple[int, socket.socket] | None
        _handover: Any
        _server: ForkServer | None
        _server_started: float | None
        _wakeup: WakeupPipe

        def _accepting(self) -> bool: ...
        def _handing(self) -> bool: ...
        def _busy_slots(self) -> int: ...
        def _close_channels(self) -> None: ...
        def _withdraw_ahead(self, current: float, unblock: bool = True) -> None: ...
        def _child_ended(self, child: Child, status: int) -> None: ...

    def _start_server(self) -> None:
        """Start the fork server (at run(), or to replace one that died, not too often)."""
        current = time.monotonic()
        if (not self.fork_server or not fork_server.supported() or (
                self._server_started is not None
                and current < self._server_started + SERVER_RESTART_PAUSE)):
            return
        self._server_started = current
        if not fork_server.become_subreaper(True):
            logger.warning("listener %s: cannot adopt orphans (prctl); forking its own task "
                           "processes", self.listener_id)
            self.fork_server = False
            return
        listener = os.getpid()

        def spare_main(sock: socket.socket) -> NoReturn:
            self._task_process().main(sock, (listener, os.getppid()))

        if self._before_fork:
            self._before_fork()
        self._server = ForkServer.start(self._server_prepare, self._before_fork, spare_main)

    def _server_prepare(self) -> None:
        """In the fork server: what is the listener's is not its own."""
        self._wakeup.forget()
        self._close_channels()
        if self._spare is not None:
            self._spare[1].close()

    def _stop_server(self) -> None:
        """At the listener's end: its processes become its own (it is their subreaper)."""
        if self._server is not None:
            self._server.stop()
            self._server = None
        if fork_server.supported() and self._server_started is not None:
            fork_server.become_subreaper(False)

    def _lose_server(self, why: str, reaped: bool = False) -> list[tuple[int, int]]:
        """Let the fork server go; returns the exits it reported that were not read yet."""
        server = self._server
        assert server is not None
        logger.warning("listener %s: fork server %d %s; forking task processes here until "
                       "another starts", self.listener_id, server.pid, why)
        news = self._server_news()
        server.stop(reaped)
        self._server = None
        return news

    def _server_news(self) -> list[tuple[int, int]]:
        """The exits the fork server reported; a spare it sent becomes the spare (or is let go:
        one is there already, or the listener takes no more tasks)."""
        server = self._server
        if server is None:
            return []
        server.settle()
        for spare in server.spares:
            if self._spare is None and self._accepting():
                self._spare = spare
            else:
                spare[1].close()  # on end of file, it exits
        server.spares.clear()
        exits, server.exits = server.exits, []
        return exits

    def _server_due(self, current: float) -> float:
        """When the fork server's answer is due (monotonic), or infinity if it owes none. It
        owes a spare asked for, and the exit of each process of its whose socket closed (it
        exited, or is about to) or that never got its task (it died)."""
        server = self._server
        assert server is not None
        owes = server.asked or any(
            child.channel is None or not child.channel.open
            for pid, child in self.children.items() if pid in server.forked)
        if not owes:
            server.owed_since = None
            return float("inf")
        if server.owed_since is None:
            server.owed_since = current
        return server.owed_since + fork_server.SPAWN_WAIT

    def _task_process(self) -> TaskProcess:
        return TaskProcess(self._protocol, self.listener_id, self._callback, self.policy,
                           self._on_task_end)

    def _spawn(self) -> tuple[int, socket.socket]:
        """A task process that waits, on a socket, for the task it is to run (and says on it
        when the task's code starts): from the fork server, or forked here."""
        if self._server is None:
            self._start_server()
        if self._server is not None:
            spare = self._server.spare()
            if spare is not None:
                return spare
            self._lose_server("is gone" if self._server.gone
                              else f"sent no spare within {fork_server.SPAWN_WAIT:g} s")
        process = self._task_process()
        parent = os.getpid()

        def in_spare() -> None:
            self._wakeup.forget()
            self._close_channels()  # the listener's ends are not its own

        return fork_server.fork_spare(self._before_fork, in_spare,
                                      lambda sock: process.main(sock, (parent,)))

    def _ready_spare(self) -> tuple[int, socket.socket]:
        """The spare task process, forked now if there is none (or it died): the task is
        started with its pid (take.lua), so the fork is not on the way from enqueue to the
        task's code when the listener was idle, nor between two tasks of a queue. (A spare
        that died since the loop last collected its children is named all the same: its task
        goes back to the queue once its exit is read, see _child_ended.)"""
        if self._spare is None:
            self._spare = self._spawn()
        return self._spare

    def _keep_spare(self) -> None:
        """Have a spare task process ready (not in burst mode, where the listener is about to
        exit), busy slots or not: forked while tasks run, it is there the moment one ends, so a
        queue drains without a fork between two tasks (the spare runs nothing until then).
        Not while the task just handed over is on its way to its code (see BEGIN_WAIT). While
        every slot is busy, the fork server's comes when it comes (_server_news); with a slot
        free, the listener waits for it, to send the take ahead that names it (take_ahead.py)."""
        if self._spare is None and not self.burst and self._accepting() and not self._handing():
            if self._server is not None and self._busy_slots() >= self.concurrency:
                self._server.ask()
            else:
                self._spare = self._spawn()

    def _drop_spare(self) -> None:
        """Let the spare process go: on end of file it exits at once, unused."""
        self._handover = None
        self._withdraw_ahead(time.monotonic())
        if self._spare is not None:
            pid, sock = self._spare
            self._spare = None
            sock.close()
            try:
                os.waitpid(pid, 0)  # the fork server's reaps it (and says so, to no one)
            except ChildProcessError:
                pass

    def _collect_children(self) -> None:
        """Reap every exited child (the spare, the fork server, the orphans of the processes
        it forked: PID 1 here does not reap zombies), read the exits the server reported, and
        record the end of those that died without reporting."""
        exits = self._server_news()
        current = time.monotonic()
        if self._server is not None and current >= self._server_due(current):
            exits += self._lose_server(f"owed an answer for {fork_server.SPAWN_WAIT:g} s")
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if self._server is not None and pid == self._server.pid:
                exits += self._lose_server(f"exited ({describe_exit(status)})", reaped=True)
            else:
                exits.append((pid, status))
        for pid, status in exits:  # a pid may come twice: the server's word, then its zombie
            if self._spare is not None and pid == self._spare[0]:
                self._withdraw_ahead(time.monotonic())
                logger.warning("listener %s: spare task process %d %s while idle; forking "
                               "another", self.listener_id, pid, describe_exit(status))
                self._spare[1].close()
                self._spare = None
                continue
            child = self.children.pop(pid, None)
            if child is not None:
                self._child_ended(child, status)
