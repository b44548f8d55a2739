"""The listener's wake-up pipe: signals (through ``signal.set_wakeup_fd``) and ``stop()`` from
another thread write a byte to it, so that the listener's one ``select()`` returns at once,
whatever else it waits on."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any


class WakeupPipe:
    """A non-blocking pipe, open while the listener runs, with the signal handlers it wakes
    for."""

    def __init__(self) -> None:
        self._read: int | None = None
        self._write: int | None = None

    def open(self, handlers: dict[signal.Signals, Callable[..., Any]]) -> dict[Any, Any]:
        """Make the pipe and install ``handlers``; returns what they replaced, for close()."""
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        previous: dict[Any, Any] = {
            "wakeup": signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)}
        for signum, handler in handlers.items():
            previous[signum] = signal.signal(signum, handler)
        return previous

    def close(self, previous: dict[Any, Any]) -> None:
        """Put back what open() replaced, and close the pipe."""
        signal.set_wakeup_fd(previous.pop("wakeup"))
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        self._close_pipe()

    def forget(self) -> None:
        """In a forked task process: the pipe is the listener's. Closed and forgotten, so that no
        handler inherited from the listener ever writes to a reused descriptor number."""
        signal.set_wakeup_fd(-1)
        self._close_pipe()

    def poke(self) -> None:
        """Wake the listener's select() (a no-op while it does not run)."""
        if self._write is not None:
            try:
                os.write(self._write, b"s")
            except OSError:
                pass  # full: it wakes up all the same

    def fileno(self) -> int:
        assert self._read is not None, "the wake-up pipe is not open"
        return self._read

    def drain(self) -> None:
        """Read what woke the listener, so the next select() waits again."""
        try:
            while os.read(self.fileno(), 512):
                pass
        except BlockingIOError:
            pass

    def _close_pipe(self) -> None:
        assert self._read is not None and self._write is not None, "the wake-up pipe is not open"
        os.close(self._read)
        os.close(self._write)
        self._read = self._write = None
