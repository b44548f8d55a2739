"""Takes whose reply was lost.

A take whose reply never came (the connection dropped after Redis read the call) may have
reserved and started a task all the same: the task waits in the listener's reserved list
under that call's token, never handed to a process. The listener remembers such tokens and
looks for them once a second for ``LOST_TAKE_SECONDS``; a task found goes back to its queue,
first of its priority, uncounted (finish.lua's requeue).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .values import printable

if TYPE_CHECKING:
    from .protocol import Protocol

logger = logging.getLogger("django_blueque.listener")

LOST_TAKE_SECONDS = 60.0
"""How long the token of a take whose reply was lost is looked for in the reserved lists."""


class LostTakes:
    """The tokens of one listener's takes whose reply was lost."""

    def __init__(self, protocol: Protocol, listener_id: str) -> None:
        self.protocol = protocol
        self.listener_id = listener_id
        self._sent: dict[str, tuple[str, float, int]] = {}  # token -> (queue, when, pid)
        self.next_look = 0.0

    def __bool__(self) -> bool:
        return bool(self._sent)

    def add(self, token: str, queue: str, sent: float, pid: int) -> None:
        self._sent[token] = (queue, sent, pid)

    def settle(self, current: float) -> None:
        """Send back to its queue every task a lost take left reserved; forget tokens older
        than LOST_TAKE_SECONDS."""
        self.next_look = current + 1.0
        for token, (queue, sent, pid) in list(self._sent.items()):
            for task_id in self.protocol.reserved_under(queue, self.listener_id, token):
                if self.protocol.finish(queue, task_id, listener_id=self.listener_id, pid=pid,
                                        token=token, outcome="requeue",
                                        value="") == "requeued":
                    logger.warning("listener %s: task %s, reserved by a call whose reply was "
                                   "lost, went back to its queue", self.listener_id,
                                   printable(task_id))
            if current - sent > LOST_TAKE_SECONDS:
                del self._sent[token]
