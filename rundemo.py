#!/usr/bin/env python3
"""The demo, in one command: ``python3 rundemo.py`` (``--help`` lists its options). It installs
what it needs into ``.venv/``, starts Redis, the listener and the web server, and prints the
URL and an admin login; Ctrl-C stops everything. How it does it: devtools/demo.py.

Why not ``demo.py``: the test project has an app named ``demo``, and the tests put the
repository root on ``sys.path`` before ``testproject/``, so a ``demo.py`` here would shadow
that app (``import demo.tasks`` would fail)."""

import sys

from devtools.demo import main

if __name__ == "__main__":
    sys.exit(main())
