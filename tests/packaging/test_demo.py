"""The demo command (``python3 rundemo.py``) brings the demo up, a task started from the demo page
completes, the admin views show it to the printed admin user, and a stop signal ends every
process the demo started, task processes included.

The demo runs with ``--no-install`` (this interpreter already has what it needs), its data in a
temporary folder and its own private Redis (``BLUEQUE_URL`` is removed), so it touches nothing
it did not create. The demo runs are slow: skipped by ``runtests.py --fast``."""

import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_agnostic

REPO = Path(__file__).resolve().parents[2]



def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def proc_children():
    """{pid: ppid} of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                table[int(entry)] = int(fields[1])
    return table


def tree(pid):
    table = proc_children()
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for child, ppid in table.items():
            if ppid == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def running(pids):
    table = proc_children()
    return {pid for pid in pids if pid in table}


class Demo:
    """rundemo.py in a subprocess, its output collected by a thread."""

    def __init__(self, tmp_path, *args, env_extra=None):
        env = {k: v for k, v in os.environ.items()
               if k not in ("BLUEQUE_URL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
        env.update(env_extra or {})
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "rundemo.py"), "--no-install", "--data",
             str(tmp_path / "demo-data"), "--port", str(free_port()), *args],
            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self):
        return "".join(self.lines)

    def wait_for(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output)
            if found:
                return found
            assert self.process.poll() is None, f"rundemo.py exited early:\n{self.output}"
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in the demo's output after {timeout} s:\n"
                             f"{self.output}")

    def stop(self, signum, timeout=60):
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"rundemo.py did not stop within {timeout} s:\n{self.output}")

    def kill(self):
        for pid in tree(self.process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.kill()
        self.process.wait()


class Browser:
    """Just enough of a browser: cookies, CSRF tokens, no redirect following."""

    def __init__(self, base):
        self.base = base.rstrip("/")
        self.jar = http.cookiejar.CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), NoRedirect)

    def _open(self, request):
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def get(self, path):
        return self._open(self.base + path)

    def post(self, path, data):
        token = next(c.value for c in self.jar if c.name == "csrftoken")
        body = urllib.parse.urlencode({**data, "csrfmiddlewaretoken": token}).encode()
        return self._open(urllib.request.Request(self.base + path, data=body,
                                                 headers={"Referer": self.base + path}))

    def start_task(self, **form):
        assert self.get("/")[0] == 200
        status, _ = self.post("/start/", form)
        assert status == 302
        status, html = self.get("/")
        return re.search(r'data-task="([^"]+)"', html).group(1)  # newest first

    def task_status(self, task_id):
        status, body = self.get(f"/status/{task_id}/")
        assert status == 200, body
        return json.loads(body)

    def wait_status(self, task_id, statuses, timeout):
        deadline = time.monotonic() + timeout
        while True:
            task = self.task_status(task_id)
            if task["status"] in statuses:
                return task
            assert time.monotonic() < deadline, task
            time.sleep(0.2)


@pytest.mark.slow
def test_demo_runs_a_task_from_its_page_and_stops_everything(tmp_path):
    demo = Demo(tmp_path, "--grace", "2")
    try:
        url = demo.wait_for(r"The demo is running\. Open +(http://\S+)", 120).group(1)
        password = demo.wait_for(r"log in as: +admin / (\S+)", 5).group(1)
        assert "started a private" in demo.output  # BLUEQUE_URL unset: its own Redis

        browser = Browser(url)
        task_id = browser.start_task(kind="long", steps=3, delay=10)
        done = browser.wait_status(task_id, {"complete", "failed"}, 60)
        assert done["status"] == "complete", done
        assert done["progress"] == 100

        assert browser.get("/admin/django_blueque/queue/")[0] == 302  # to the login page
        assert browser.get("/admin/login/")[0] == 200
        status, _ = browser.post("/admin/login/?next=/admin/django_blueque/queue/",
                                 {"username": "admin", "password": password,
                                  "next": "/admin/django_blueque/queue/"})
        assert status == 302
        status, html = browser.get("/admin/django_blueque/queue/")
        assert status == 200 and "demo.long" in html
        status, html = browser.get(f"/admin/django_blueque/queue/tasks/{task_id}/")
        assert status == 200 and task_id in html

        # a long task still running when the demo is stopped: its process is stopped too
        long_id = browser.start_task(kind="long", steps=500, delay=10)
        browser.wait_status(long_id, {"started"}, 30)
        started = tree(demo.process.pid)
        assert len(started) >= 4, started  # redis, listener, its task process, web server
    except BaseException:
        demo.kill()
        raise
    code = demo.stop(signal.SIGTERM)
    assert code == 0, demo.output
    assert "everything the demo started has stopped" in demo.output
    assert running(started) == set(), f"left running: {running(started)}\n{demo.output}"


@pytest.mark.slow
def test_demo_stops_everything_on_ctrl_c(tmp_path):
    demo = Demo(tmp_path, "--grace", "1")
    try:
        demo.wait_for(r"The demo is running", 120)
        started = tree(demo.process.pid)
    except BaseException:
        demo.kill()
        raise
    assert demo.stop(signal.SIGINT) == 0, demo.output
    assert running(started) == set(), demo.output


@pytest.mark.parametrize("app", sorted(p.parent.name for p in (REPO / "testproject").glob(
    "*/__init__.py")))
def test_no_module_at_the_root_shadows_a_test_project_app(app):
    """The tests put the repository root on sys.path before testproject/: a root module named
    like one of its apps (as ``demo.py`` would be) hides the app."""
    assert not (REPO / f"{app}.py").exists()
