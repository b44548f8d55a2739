#!/usr/bin/env python3
"""The one test command: ``python3 runtests.py`` (``--help`` lists its options). It installs
what the tests need and runs the whole suite in each supported (Python, Django) environment;
exit status 0 only if every one passed. How it does it: devtools/testing.py."""

import sys

from devtools.testing import main

if __name__ == "__main__":
    sys.exit(main())
