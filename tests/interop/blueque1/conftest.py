# Files here are run by harness.py in a subprocess (see test_blueque1_suites.py), never
# collected by pytest itself: they import ``blueque``, which this interpreter does not have.
collect_ignore = ["upstream", "shim", "behaviour.py", "harness.py"]
