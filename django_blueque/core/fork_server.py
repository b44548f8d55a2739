"""The fork server: a process the listener forks once, as it starts, to fork its spare task
processes for it (Linux only).

A fork costs the forking process more than the fork: the kernel copies its page table, and
while a child shares its pages, the first write to each one copies it (the listener's loop
writes to hundreds per task: reference counts). Forked from a server that does nothing else,
the listener never forks again, and a page it writes is its own for good (bench/README.md,
"Where the CPU goes"). The server's heap is the listener's as it started, as the spares' was.

One SOCK_SEQPACKET pair, one message each way per event:

- listener -> server: ``f``, fork a spare;
- server -> listener: ``p<pid>`` with the listener's end of the spare's socket (SCM_RIGHTS);
- server -> listener: ``x<pid> <status>``, a process of its exited (a ``waitpid`` status),
  sent *before* the server reaps it (``waitid`` with ``WNOWAIT``).

No exit is lost: the listener is its processes' subreaper (``PR_SET_CHILD_SUBREAPER``), so
when the server dies, they become the listener's own children, reaped and read as if it had
forked them, along with any zombie whose exit the server sent but had not reaped (its pid read
twice: the listener knows it no longer). The server dies with the listener
(``PR_SET_PDEATHSIG``), and exits at the end of its socket.
"""

from __future__ import annotations

import functools
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36

NAME = b"bq-fork-server"
"""Its name in ps and top (the kernel's ``comm``, 15 bytes at most); its spares take back the
listener's."""

FD_SPACE = socket.CMSG_SPACE(4)  # one descriptor, a C int

SPAWN_WAIT = 2.0
"""How long the listener waits for an answer the fork server owes it (a spare, an exit) before
it lets the server go and forks its spares itself (a server stopped or starved does not stop
the listener)."""


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds")


@functools.cache
def _libc() -> Any:
    import ctypes  # only where the fork server runs

    return ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int | bytes) -> bool:
    return bool(_libc().prctl(option, value, 0, 0, 0) == 0)


def fork_spare(before_fork: Callable[[], object] | None, in_child: Callable[[], object],
               spare_main: Callable[[socket.socket], NoReturn]) -> tuple[int, socket.socket]:
    """Fork a spare task process, with a socket pair: in it, ``in_child()`` (to close what
    is not its own), then ``spare_main(its end)``; returns its pid and the other end."""
    ours, theirs = socket.socketpair()
    if before_fork:
        before_fork()
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            in_child()
            spare_main(theirs)
        finally:
            os._exit(1)  # never back into the forking process's code
    theirs.close()
    return pid, ours


def become_subreaper(on: bool) -> bool:
    """Have this process adopt its descendants' orphans (its fork server's processes)."""
    return prctl(PR_SET_CHILD_SUBREAPER, int(on))


class ForkServer:
    """The listener's end of its fork server: spares asked for and received, and the exits
    the server reported, until the listener reads them."""

    def __init__(self, pid: int, control: socket.socket) -> None:
        self.pid = pid
        self._control = control
        self.asked = False  # a spare asked for and not yet received
        self.spares: list[tuple[int, socket.socket]] = []
        self.exits: list[tuple[int, int]] = []
        self.forked: set[int] = set()  # its processes whose exit it has not reported
        self.owed_since: float | None = None  # see Spares._server_due
        self.gone = False  # its socket ended: it died (or exited)

    @classmethod
    def start(cls, prepare: Callable[[], object], before_fork: Callable[[], object] | None,
              spare_main: Callable[[socket.socket], NoReturn]) -> ForkServer:
        """Fork the server: ``prepare()`` runs in it first (to close what is the listener's),
        ``before_fork`` before each fork, and ``spare_main(sock)`` in each spare."""
        ours, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener = os.getpid()
        for stream in (sys.stdout, sys.stderr):  # else each spare writes it again at its exit
            if stream is not None:
                stream.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ours.close()
                prepare()
                code = _serve(its, listener, before_fork, spare_main)
            except BaseException:
                traceback.print_exc()  # the listener logs that it exited; this says why
            finally:
                os._exit(code)  # never back into the listener's code
        its.close()
        return cls(pid, ours)

    def fileno(self) -> int:
        return self._control.fileno()

    def settle(self) -> None:
        """Read what the server sent (for select(), as a peek's settle())."""
        while not self.gone:
            try:  # not socket.recv_fds: before Python 3.13 it ignores its flags
                message, ancillary, _, _ = self._control.recvmsg(64, FD_SPACE,
                                                                 socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                message, ancillary = b"", []
            fds = [int.from_bytes(data[:4], sys.byteorder, signed=True)
                   for level, kind, data in ancillary
                   if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS)]
            self.owed_since = None  # it answers
            if not message:
                self.gone = True
            elif message[:1] == b"p" and fds:
                self.spares.append((int(message[1:]), socket.socket(fileno=fds[0])))
                self.forked.add(self.spares[-1][0])
                self.asked = False
            elif message[:1] == b"x":
                pid, status = message[1:].split()
                self.exits.append((int(pid), int(status)))
                self.forked.discard(int(pid))

    def ask(self) -> None:
        """Ask for a spare, unless one is on its way or here."""
        if not (self.asked or self.spares or self.gone):
            try:
                self._control.send(b"f", socket.MSG_DONTWAIT)
                self.asked = True
            except OSError:
                self.gone = True

    def spare(self, wait: float = SPAWN_WAIT) -> tuple[int, socket.socket] | None:
        """A spare, waiting up to ``wait`` seconds for the one asked for; None if the server
        did not send one by then (or is gone)."""
        self.ask()
        deadline = time.monotonic() + wait
        self.settle()
        while not self.spares and not self.gone:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            select.select([self._control], [], [], remaining)
            self.settle()
        return self.spares.pop(0) if self.spares else None

    def stop(self, reaped: bool = False) -> None:
        """Close it, and end it unless it was ``reaped`` already (its pid may be another's
        then); its processes are the listener's (it is their subreaper)."""
        self.gone = True
        self._control.close()
        for _, sock in self.spares:
            sock.close()
        self.spares.clear()
        if not reaped:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _serve(control: socket.socket, listener: int, before_fork: Callable[[], object] | None,
           spare_main: Callable[[socket.socket], NoReturn]) -> int:
    """The server's loop: fork a spare per request, report each exit before reaping it."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != listener:
        return 0  # the listener died before the line above
    with open("/proc/self/comm", "rb") as comm:
        name = comm.read().strip()
    prctl(PR_SET_NAME, NAME)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # the listener's, not its
        signal.signal(signum, signal.SIG_IGN)
    woken, wake = os.pipe()
    os.set_blocking(woken, False)
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        _report_exits(control)
        readable, _, _ = select.select([control.fileno(), woken], [], [])
        if woken in readable:
            while _read_some(woken):
                pass
        if control.fileno() in readable:
            if not control.recv(16):
                return 0  # the listener closed it
            def in_spare() -> None:
                signal.set_wakeup_fd(-1)
                for fd in (woken, wake):
                    os.close(fd)
                control.close()
                prctl(PR_SET_NAME, name)

            pid, ours = fork_spare(before_fork, in_spare, spare_main)
            socket.send_fds(control, [b"p%d" % pid], [ours.fileno()])
            ours.close()


def _report_exits(control: socket.socket) -> None:
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or not info.si_pid:
            return
        control.send(b"x%d %d" % (info.si_pid, _wait_status(info)))
        os.waitpid(info.si_pid, 0)


def _wait_status(info: os.waitid_result) -> int:
    """The status waitpid() would have returned."""
    if info.si_code == os.CLD_EXITED:
        return (info.si_status & 0xFF) << 8
    if info.si_code == os.CLD_DUMPED:
        return (info.si_status & 0x7F) | 0x80
    return info.si_status & 0x7F


def _read_some(fd: int) -> bool:
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False
