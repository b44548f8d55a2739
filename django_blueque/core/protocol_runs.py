"""What a run writes besides its start and its end (Protocol.runs): its checkpoint, guarded
by the run's lease token, so a run recovered elsewhere never writes over the newer run's (the
resources a run used are recorded with its end, by finish.lua)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .protocol_upkeep import encode_time, now

if TYPE_CHECKING:
    from .redis_access import RedisAccess


class RunOperations:
    """A run's checkpoint, written through ``access``."""

    def __init__(self, access: RedisAccess) -> None:
        self.access = access
        self.keys = access.keys

    def save_checkpoint(self, task_id: str, token: str, state: str) -> bool:
        """Store a run's checkpoint (JSON) if it still holds the lease ``token``."""
        return bool(self.access.script("checkpoint")(
            keys=[self.keys.task(task_id)], args=[token, state, encode_time(now())]))
