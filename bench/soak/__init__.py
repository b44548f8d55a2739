"""The soak of bench/soak.py: its Django app (tasks.py), settings, servers, load, faults and the
ledger that judges the run. The app's tasks write their own start and end to a file, the side
channel that Redis faults cannot touch."""
