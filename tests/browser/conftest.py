"""Browser tests: Playwright driving Debian's headless chromium (never a downloaded browser)
against the real thing: ``manage.py runserver`` and ``manage.py bq_listen --with-scheduler``
as subprocesses on the private Redis of the session."""

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from devtools.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
PASSWORD = "browser-test-password"


def _require(reason):
    """In CI the browser tests must run: a missing piece fails them there, skips them here."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium, installed with apt-get when it is missing."""
    if not os.path.exists(CHROMIUM):
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            _require(f"{CHROMIUM} is missing and apt-get cannot install it here (not root?)")
        for command in (["apt-get", "update", "-qq"],
                        ["apt-get", "install", "-y", "-qq", "chromium"]):
            result = subprocess.run(command, capture_output=True, text=True,
                                    env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
            if result.returncode:
                _require(f"{' '.join(command)} failed: {result.stderr[-2000:]}")
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium):
    """One browser per module: Playwright's sync API runs an event loop in this thread while it
    is open, and Django's async_to_sync refuses to run beside one (the Tasks framework's async
    tests would fail if a browser outlived the browser tests)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _wait_http(url, process, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def _stop(process):
    """SIGTERM (the listener's graceful stop), a second one, then SIGKILL of its group."""
    for signum in (signal.SIGTERM, signal.SIGTERM):
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                continue
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="module")
def site(redis_server, tmp_path_factory):
    """The testproject served by runserver, with a listener (and scheduler, and reaper)."""
    redis.Redis.from_url(redis_server.url).flushdb()
    workdir = tmp_path_factory.mktemp("browser-site")
    env = dict(os.environ, BLUEQUE_URL=redis_server.url,
               BLUEQUE_DB_PATH=str(workdir / "db.sqlite3"), DJANGO_SUPERUSER_PASSWORD=PASSWORD,
               DJANGO_SETTINGS_MODULE="testproject.settings", PYTHONUNBUFFERED="1")
    manage = [sys.executable, str(ROOT / "testproject" / "manage.py")]
    subprocess.run(manage + ["migrate", "--verbosity", "0"], env=env, check=True, cwd=ROOT)
    subprocess.run(manage + ["createsuperuser", "--noinput", "--username", "admin",
                             "--email", "admin@example.com"], env=env, check=True, cwd=ROOT)
    logs = ARTIFACTS / "browser-logs"
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    processes = []
    try:
        with open(logs / "bq_listen.log", "w") as listen_log, \
                open(logs / "runserver.log", "w") as server_log:
            processes.append(subprocess.Popen(
                manage + ["bq_listen", "--noreload", "--with-scheduler", "--concurrency", "2"],
                env=env, cwd=ROOT, stdout=listen_log, stderr=subprocess.STDOUT,
                start_new_session=True))
            processes.append(subprocess.Popen(
                manage + ["runserver", "--noreload", "--insecure", f"127.0.0.1:{port}"],
                env=env, cwd=ROOT, stdout=server_log, stderr=subprocess.STDOUT,
                start_new_session=True))
            base = f"http://127.0.0.1:{port}"
            _wait_http(f"{base}/admin/login/", processes[1])
            yield {"url": base, "redis_url": redis_server.url, "user": "admin",
                   "password": PASSWORD}
    finally:
        for process in reversed(processes):
            _stop(process)


@pytest.fixture
def page(browser, site):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


@pytest.fixture(scope="session")
def shot():
    """Save a full-page screenshot to test-artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)

    def save(page, name):
        page.screenshot(path=str(ARTIFACTS / f"admin-{name}.png"), full_page=True)
    return save
