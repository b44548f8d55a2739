"""The machinery of the repository's two commands, ``python3 rundemo.py`` (demo.py) and
``python3 runtests.py`` (testing.py): standard library only, run by any Python 3.11+ before
anything is installed. Not part of the package: the wheel holds django_blueque alone."""
