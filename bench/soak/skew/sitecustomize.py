"""Put on the PYTHONPATH of one soak listener: shifts its ``time.time()`` (and the task
processes it forks) by SOAK_CLOCK_SKEW seconds, a host whose clock is wrong. (libfaketime hangs
Python's monotonic waits here; the monotonic clock is left alone, as NTP leaves it.)"""

import os
import time

_skew = float(os.environ.get("SOAK_CLOCK_SKEW", "0"))
if _skew:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _skew
    time.time_ns = lambda: _time_ns() + int(_skew * 1e9)
