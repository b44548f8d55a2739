"""The soak of bench/soak.py: its Django app (tasks.py), settings, servers, load, faults and the
ledger that judges the run. The app's tasks write their own start and end to a file, the side
channel that Redis faults cannot touch."""

import sys
from pathlib import Path

# The private Redis set-ups (devtools/servers.py, redis_sentinel.py, redis_cluster.py) live
# at the root of this checkout.
sys.path.append(str(Path(__file__).resolve().parents[2]))
