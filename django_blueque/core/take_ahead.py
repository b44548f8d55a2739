"""Takes whose outcome the listener learns late: sent ahead of their task, or whose reply was
lost.

A take sent ahead: when an idle listener of one queue arms its blocking peek on the pending
list, it sends its take (take.lua, with its spare's pid and a new token) in the same write,
right behind the peek. Redis runs what a blocked connection sent as soon as the block ends, so
the take runs the moment a task comes, and the listener wakes up with the task reserved and
started: one round trip fewer from an enqueue to the task's code (on a 2-core VM, where waking
an idle core costs about 0.25 ms, that round trip was 0.4-0.6 ms of 2.3 to 3).

The take names the spare, so it is withdrawn before the spare is let go or found dead, before
the listener takes otherwise (a task with a priority woke its other peek) and when it stops
taking: Redis ends the peek (CLIENT UNBLOCK), the take runs then, and what it took is handed
over (a take) or put back, uncounted (a withdrawal). A take whose reply is lost (its connection
cut, or a peek that went deaf: see waiter.deaf) is settled as every take whose reply was lost
(_settle_unsure). Not in cluster mode, nor where each take waits for replicas
(Protocol.TAKES_AHEAD), nor for a listener of several queues (one spare, one take ahead). The
peek is renewed once a minute (waiter.py); a take that then found nothing is not sent again
until the listener takes a task, so an idle listener costs Redis what it did.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

from .channel import rouse
from .protocol import new_token
from .values import Taken, printable, taken

if TYPE_CHECKING:
    from .client import Client
    from .protocol import Protocol
    from .waiter import PendingWaiter

logger = logging.getLogger("django_blueque.listener")

SENT, ANSWERED, LOST = "sent", "answered", "lost"

UNSURE_SECONDS = 60.0
"""How long the token of a take whose reply was lost is looked for in the reserved lists
(see _settle_unsure): Redis runs such a call whenever it reads it, as late as it resumes."""

UNBLOCK_WAIT = 5.0
"""Seconds a withdrawn take's reply is waited for before it is counted as lost."""


class TakeAhead:
    """One take sent behind a peek, and what became of it (the peek calls answered(reply) or
    lost())."""

    __slots__ = ("queue", "token", "pid", "command", "state", "reply")

    def __init__(self, queue: str, token: str, pid: int, command: tuple[Any, ...]) -> None:
        self.queue, self.token, self.pid, self.command = queue, token, pid, command
        self.state = SENT
        self.reply: object = None

    def answered(self, reply: object) -> None:
        self.state, self.reply = ANSWERED, reply

    def lost(self) -> None:
        if self.state == SENT:
            self.state = LOST


class TakesAhead:
    """ForkingRunner's half that sends takes ahead and collects them, and settles takes whose
    reply was lost."""

    if TYPE_CHECKING:  # ForkingRunner's state, shared with this half
        _client: Client
        _protocol: Protocol
        listener_id: str
        queues: list[str]
        children: dict[int, Any]
        concurrency: int
        _waiters: dict[str, PendingWaiter]
        _spare: tuple[int, socket.socket] | None
        _unsure: dict[str, tuple[str, float, int]]
        _ahead: TakeAhead | None

        def _accepting(self) -> bool: ...
        def _handing(self) -> bool: ...
        def _busy_slots(self) -> int: ...
        def _put_back(self, queue: str, token: str, pid: int, task_id: str) -> None: ...

    def _arm(self, queue: str) -> None:
        """Arm a queue found empty: its peeks, the pending list's with a take behind it when
        the listener may send one (a spare ready, a slot free)."""
        waiter = self._waiters[queue]
        pending = waiter.peeks[0]
        if (self._ahead is None and not pending.armed and self._spare is not None
                and self._protocol.TAKES_AHEAD and len(self.queues) == 1
                and self._busy_slots() < self.concurrency and self._accepting()
                and not self._handing()):
            token, pid = new_token(), self._spare[0]
            self._ahead = TakeAhead(queue, token, pid, self._protocol.take_ahead(
                queue, self.listener_id, token, pid))
            pending.arm(self._ahead)
            if pending.behind is None:  # refused (see Peek.arm)
                self._ahead = None
        waiter.arm()

    def _rouse_spare(self, readable: list[Any]) -> None:
        """The peek of the take sent ahead returned (``readable``, from select): the spare it
        names wakes up now, while the listener reads the take's reply, for the task it may
        bring (channel.rouse)."""
        ahead, spare = self._ahead, self._spare
        if (ahead is not None and spare is not None and spare[0] == ahead.pid
                and self._waiters[ahead.queue].peeks[0] in readable):
            rouse(spare[1])

    def _taken_ahead(self, current: float, unblock: bool = True
                     ) -> tuple[str, str, int, Taken] | None:
        """What the take sent ahead took, ``(queue, token, pid, taken)``, withdrawn first if
        its peek still waits (or, ``unblock`` False, counted as lost). None if there is none,
        it took nothing, it was lost, or Redis refused it: the usual take then follows (which
        loads a script Redis lacks, or meets the refusal again)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if ahead.state == SENT:
            peek = self._waiters[ahead.queue].peeks[0]
            if unblock:
                peek.unblock(self._client.redis, UNBLOCK_WAIT)
            else:
                peek.close()
        if ahead.state == LOST:
            self._unsure[ahead.token] = (ahead.queue, current, ahead.pid)
            return None
        found = None if isinstance(ahead.reply, Exception) else taken(ahead.reply)  # type: ignore[arg-type]
        return None if found is None else (ahead.queue, ahead.token, ahead.pid, found)

    def _withdraw_ahead(self, current: float, unblock: bool = True) -> None:
        """Withdraw the take sent ahead: its spare is going, or the listener stops taking (or
        Redis fails: ``unblock`` False). A task it took goes back to its queue, uncounted."""
        answer = self._taken_ahead(current, unblock)
        if answer is not None:
            queue, token, pid, found = answer
            if found[1] == "skipped":
                self._dropped(queue, found)
            else:
                self._put_back(queue, token, pid, found[0])

    @staticmethod
    def _dropped(queue: str, found: Taken) -> None:
        """Log an id a take dropped from the queue (reserve.lib's 'skipped': no task there)."""
        logger.warning("queue %s: dropped id %s: %s", queue, printable(found[0]), found[2])

    def _settle_unsure(self, current: float) -> None:
        """A take whose reply was lost (its connection cut, or Redis stalled past the socket
        timeout) may have reserved and started a task all the same, once Redis read the call:
        the task waits in this listener's reserved list under that call's token, never handed
        to its process, and as this listener lives, no reaper would release it before its
        lease lapsed (and then as a failed run). Such a task goes back to its queue, first of
        its priority, uncounted (finish.lua's requeue). Looked for once a second, for
        UNSURE_SECONDS."""
        self._next_settle = current + 1.0
        for token, (queue, sent, pid) in list(self._unsure.items()):
            for task_id in self._protocol.reserved_under(queue, self.listener_id, token):
                if self._protocol.finish(queue, task_id, listener_id=self.listener_id, pid=pid,
                                         token=token, outcome="requeue",
                                         value="") == "requeued":
                    logger.warning("listener %s: task %s, reserved by a call whose reply was "
                                   "lost, went back to its queue", self.listener_id,
                                   printable(task_id))
            if current - sent > UNSURE_SECONDS:
                del self._unsure[token]
