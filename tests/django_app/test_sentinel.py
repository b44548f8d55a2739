"""BLUEQUE through Redis Sentinel: a real sentinel process (redis-server --sentinel) that
monitors the private Redis, and tasks written through the master it names."""

import shutil
import ssl
import subprocess
import time
import urllib.parse

import pytest
import redis
from demo.tasks import report

from devtools.servers import die_with_parent, free_port
from django_blueque import get_result
from django_blueque.conf import get_client


@pytest.fixture
def sentinel(redis_url, tmp_path):
    master = urllib.parse.urlsplit(redis_url)
    port = free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                      f"sentinel monitor mymaster {master.hostname} {master.port} 1\n")
    process = subprocess.Popen([shutil.which("redis-server"), str(config), "--sentinel"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=die_with_parent)
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


def test_tls_options_reach_every_connection(settings):
    """OPTIONS {"ssl": True, ...} with SENTINELS: the engine's connections are TLS ones, with
    those options. redis-py's Sentinel pool keeps ssl out of its connection options, and the
    engine's own pool, made from them, lost it: every connection failed (a TypeError on
    ssl_cert_reqs, an option of TLS connections only)."""
    settings.BLUEQUE = {"SENTINELS": [("127.0.0.1", 1)], "SERVICE_NAME": "mymaster",
                        "OPTIONS": {"ssl": True, "ssl_cert_reqs": "none"}}
    connection = get_client().redis.connection_pool.make_connection()
    assert isinstance(connection, redis.connection.SSLConnection)
    assert connection.cert_reqs == ssl.CERT_NONE
