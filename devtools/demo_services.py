"""Running and stopping the demo's services: Redis (unless ``BLUEQUE_URL`` names one), then
migrations and the ``admin`` user, then ``manage.py bq_listen --noreload --with-scheduler`` (one
process that is the listener, the scheduler and the reaper: what a one-machine deployment runs,
and one thing to start, watch and stop in order; separate ``bq_schedule`` and ``bq_reap``
processes are for deployments spread over several machines) and ``manage.py runserver``.

Each service is a child in a session of its own, its output in ``logs/NAME.log`` and, filtered,
on the terminal. Ctrl-C (or SIGTERM, or SIGHUP) stops everything in order: the web server (no
new task is started), the listener (it finishes its running tasks for up to ``--grace``
seconds, then is stopped; task processes still running are stopped too), then Redis (which
saves its data). A second Ctrl-C hurries every step. Nothing is left running: the demo is the
"subreaper" of everything it starts, so it also finds task processes whose listener is gone.
"""

import ctypes
import ctypes.util
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from devtools.demo_install import REPO, DemoError, binary_version, find_redis_server, say
from devtools.process_tree import alive, descendants, proc_table
from devtools.servers import answers, die_with_parent, free_port
from django_blueque.redacted import masked_url  # standard library only: importable here

PROJECT = REPO / "testproject"
MANAGE = PROJECT / "manage.py"
ADMIN_USER = "admin"
SECRET_FILES = ("secret_key", "admin-credentials.txt", "db.sqlite3", "db.sqlite3-*")
PR_SET_CHILD_SUBREAPER = 36


def write_private(path, text):
    """Write a secret file readable by its owner only, from its creation on (a chmod after
    write_text would leave it readable by everyone for a moment)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # an existing file keeps its mode through os.open
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True) \
    if sys.platform.startswith("linux") else None


class Service:
    """One long-running child: its output goes to ``logs``/NAME.log and, filtered, to the
    terminal, each line prefixed with its name."""

    def __init__(self, name, cmd, env, logs, quiet=None, to_terminal=True):
        self.name = name
        self.quiet = quiet
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"{name}.log"
        self.log = open(self.log_path, "a", buffering=1)
        self.log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(cmd)}\n")
        self.process = subprocess.Popen(
            cmd, env=env, cwd=PROJECT, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if to_terminal else self.log,
            stderr=subprocess.STDOUT, text=True, errors="replace",
            start_new_session=True, preexec_fn=die_with_parent)  # Ctrl-C reaches the demo only
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
        self.data = args.data  # --data: the database, Redis's data, the logs, the secret key
        self.logs = self.data / "logs"
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
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / "setup.log", "a") as log:
            log.write(f"\n--- {shlex.join(self.manage(*args))}\n")
            log.flush()
            process = subprocess.Popen(self.manage(*args), env=self.env, cwd=PROJECT,
                                       stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=die_with_parent)
            deadline = time.monotonic() + timeout
            while process.poll() is None:
                if self.stopping.is_set() or time.monotonic() > deadline:
                    process.kill()
                    process.wait()
                    raise DemoError(f"{what}: interrupted")
                time.sleep(0.05)
        if process.returncode != 0:
            tail = (self.logs / "setup.log").read_text(errors="replace")[-3000:]
            raise DemoError(f"{what} failed (exit {process.returncode}):\n{tail}")

    # - start -
    def start(self):
        # what the demo and its processes create (database, Redis data, logs) is theirs alone
        os.umask(0o077)
        self.data.mkdir(parents=True, exist_ok=True)
        for name in SECRET_FILES:  # made by an earlier version, or by hand
            for path in self.data.glob(name):
                path.chmod(0o600)
        secret_file = self.data / "secret_key"
        if not secret_file.exists():
            write_private(secret_file, secrets.token_urlsafe(50))
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DJANGO_SECRET_KEY": secret_file.read_text().strip(),
            "DJANGO_DEBUG": "1",  # runserver serves the admin's static files
            "BLUEQUE_DB_PATH": str(self.data / "db.sqlite3"),
            "PYTHONUNBUFFERED": "1",
        }
        self.start_redis()
        self.env["BLUEQUE_URL"] = self.redis_url
        say(f"migrating the SQLite database {self.data / 'db.sqlite3'} ...")
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
        credentials = self.data / "admin-credentials.txt"
        write_private(credentials, f"username: {ADMIN_USER}\npassword: {password}\n")

        self.services["listener"] = Service("listener", self.manage(
            "bq_listen", "--noreload", "--with-scheduler",
            "--concurrency", str(self.args.concurrency)), self.env, self.logs)
        port = self.args.port or free_port(8000)
        # the request log of the page's status polling would drown everything else
        quiet = re.compile(r'"(GET|HEAD) [^"]*" (200|204|301|302|304) ')
        self.services["web"] = Service("web", self.manage(
            "runserver", "--noreload", f"127.0.0.1:{port}"), self.env, self.logs, quiet=quiet)
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
        say(f"  Blueque admin:  {url}admin/django_blueque/queue/   (Django admin: {url}admin/)")
        say(f"  log in as:      {ADMIN_USER} / {password}   (also in {credentials})")
        say(f"  Redis:          {masked_url(self.redis_url)}")
        say(f"  processes:      {'redis-server, ' if 'redis' in self.services else ''}"
            "bq_listen --with-scheduler (listener + scheduler + reaper), runserver")
        say(f"  logs:           {self.logs}/")
        if status != 200:
            say(f"  NOTE: the demo page answered HTTP {status}; see {self.logs / 'web.log'}")
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
        data = self.data / f"{kind.lower()}-{version}"  # each version keeps its own dump format
        data.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.logs.mkdir(parents=True, exist_ok=True)
        cmd = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
               "--dbfilename", "dump.rdb", "--save", "30 1", "--appendonly", "no",
               "--daemonize", "no", "--logfile", str(self.logs / "redis.log")]
        self.services["redis"] = Service("redis", cmd, self.env, self.logs,
                                         to_terminal=False)
        deadline = time.monotonic() + 20
        while not answers(port):
            if not self.services["redis"].running() or time.monotonic() > deadline:
                raise DemoError(f"{kind} {version} ({binary}) did not start; see "
                                f"{self.logs / 'redis.log'} (python3 rundemo.py --fresh starts "
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
                                f"{self.logs / 'web.log'}")
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
