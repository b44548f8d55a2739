"""BLUEQUE through Redis Sentinel: a real sentinel process (redis-server --sentinel) that
monitors the private Redis, and tasks written through the master it names."""

import shutil
import subprocess
import time
import urllib.parse

import pytest
import redis
from demo.tasks import report

from django_blueque import get_result
from tests.redis_server import _die_with_parent, free_port


@pytest.fixture
def sentinel(redis_url, tmp_path):
    master = urllib.parse.urlsplit(redis_url)
    port = free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                      f"sentinel monitor mymaster {master.hostname} {master.port} 1\n")
    process = subprocess.Popen([shutil.which("redis-server"), str(config), "--sentinel"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=_die_with_parent)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            if client.execute_command("SENTINEL", "get-master-addr-by-name", "mymaster"):
                break
        except redis.ConnectionError:
            pass
        assert time.monotonic() < deadline, "the sentinel did not come up"
        time.sleep(0.05)
    yield port
    process.terminate()
    process.wait(10)


def test_sentinels_and_service_name_reach_the_master(settings, sentinel, r):
    settings.BLUEQUE = {"SENTINELS": [("127.0.0.1", sentinel)], "SERVICE_NAME": "mymaster",
                        "OPTIONS": {"socket_timeout": 5}}
    task_id = report.enqueue(title="through sentinel")
    assert r.hget(f"blueque_task_{task_id}", "queue") == "demo.report"
    assert get_result(task_id).status == "pending"
