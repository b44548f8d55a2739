import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.servers import wait_for  # noqa: F401  (re-exported)

MANAGE = Path(__file__).resolve().parents[2] / "testproject" / "manage.py"


@pytest.fixture
def blueque(settings, redis_url):
    """Point the project's BLUEQUE setting at the private Redis (emptied for the test)."""
    settings.BLUEQUE = {"URL": redis_url, "QUEUES": {"demo.flaky": {"RETRIES": 2, "BACKOFF": 1}}}
    return settings.BLUEQUE


class Manage:
    """Runs testproject's manage.py commands as real processes against the private Redis."""

    def __init__(self, redis_url, tmp_path):
        self.env = dict(os.environ, BLUEQUE_URL=redis_url, PYTHONUNBUFFERED="1",
                        BLUEQUE_DB_PATH=str(tmp_path / "db.sqlite3"))
        self.processes = []

    def run(self, *args, timeout=60):
        return subprocess.run([sys.executable, str(MANAGE), *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, *args):
        process = subprocess.Popen([sys.executable, str(MANAGE), *args], env=self.env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.processes.append(process)
        return process

    def stop_all(self):
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@pytest.fixture
def manage(redis_url, tmp_path):
    runner = Manage(redis_url, tmp_path)
    yield runner
    runner.stop_all()
