"""Every mistake in the BLUEQUE setting is a system check error with an id and a hint."""

import subprocess
import sys

import pytest
import redis
from demo.tasks import long_task
from django.core.exceptions import ImproperlyConfigured

from django_blueque import conf
from django_blueque.checks import check_settings

from .conftest import MANAGE

CASES = [
    ("not a dict", "redis://x", "blueque.E001"),
    ("unknown key", {"URL": "redis://localhost/0", "TIMOUT": 3}, "blueque.E002"),
    ("URL and CACHE", {"URL": "redis://localhost/0", "CACHE": "default"}, "blueque.E003"),
    ("not a redis URL", {"URL": "http://localhost:6379"}, "blueque.E004"),
    ("unknown cache alias", {"CACHE": "nope"}, "blueque.E005"),
    ("non-redis cache", {"CACHE": "locmem"}, "blueque.E005"),
    ("negative timeout", {"TIMEOUT": -1}, "blueque.E006"),
    ("retries not whole", {"RETRIES": 1.5}, "blueque.E006"),
    ("backoff a string", {"BACKOFF": "20"}, "blueque.E006"),
    ("sentinels malformed", {"SENTINELS": ["host"], "SERVICE_NAME": "m"}, "blueque.E007"),
    ("sentinels without service", {"SENTINELS": [("h", 26379)]}, "blueque.E007"),
    ("options not a dict", {"OPTIONS": ["socket_timeout"]}, "blueque.E008"),
    ("prefix with a space", {"PREFIX": "my queue"}, "blueque.E009"),
    ("queue policy unknown key", {"QUEUES": {"q": {"RETRY": 1}}}, "blueque.E010"),
    ("queue policy negative", {"QUEUES": {"q": {"RETENTION": -5}}}, "blueque.E006"),
    ("queue name with space", {"QUEUES": {"a b": {}}}, "blueque.E010"),
    ("zero interval", {"SCHEDULER_INTERVAL": 0}, "blueque.E011"),
    ("concurrency zero", {"CONCURRENCY": 0}, "blueque.E012"),
    ("eager not bool", {"EAGER": "yes"}, "blueque.E013"),
    ("short metrics token", {"METRICS_TOKEN": "abc"}, "blueque.E014"),
    ("short API token", {"API_TOKENS": {"abc": "bot"}}, "blueque.E016"),
    ("API token without a user", {"API_TOKENS": {"a" * 16: ""}}, "blueque.E016"),
    ("API tokens not a mapping", {"API_TOKENS": ["a" * 16]}, "blueque.E016"),
    ("cluster not a bool", {"CLUSTER": "yes"}, "blueque.E017"),
    ("cluster through Sentinel", {"CLUSTER": True, "SENTINELS": [("h", 26379)],
                                  "SERVICE_NAME": "m"}, "blueque.E017"),
    ("cluster with WAIT", {"CLUSTER": True, "WAIT_REPLICAS": 1}, "blueque.E017"),
    ("cluster queue with a brace", {"CLUSTER": True, "QUEUES": {"a{b}": {}}}, "blueque.E017"),
]


@pytest.mark.parametrize("value,expected_id", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_bad_setting_is_a_check_error(settings, value, expected_id):
    settings.CACHES = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://h/1"},
        "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    settings.BLUEQUE = value
    errors = check_settings()
    assert expected_id in [error.id for error in errors], errors
    assert all(error.hint for error in errors)
    with pytest.raises(ImproperlyConfigured, match=expected_id):
        conf.get_settings()


def test_good_settings_pass(settings):
    settings.BLUEQUE = {"URL": "rediss://:secret@redis.example:6380/2", "PREFIX": "blueque",
                        "RETRIES": 3, "BACKOFF": 20, "TIMEOUT": None, "RETENTION": 3600,
                        "QUEUES": {"video.encode": {"TIMEOUT": 7200, "RETRIES": 1}},
                        "OPTIONS": {"socket_timeout": 5, "health_check_interval": 30}}
    assert check_settings() == []
    conf_settings = conf.get_settings()
    assert conf_settings.policy("video.encode") == {"retries": 1, "backoff": 20,
                                                    "timeout": 7200, "retention": 3600}
    assert conf_settings.policy("other")["retries"] == 3


def test_no_setting_means_local_redis(settings):
    del settings.BLUEQUE
    assert check_settings() == []
    assert conf.get_settings().url == "redis://localhost:6379/0"


def test_manage_py_check_reports_the_id(tmp_path):
    settings_file = tmp_path / "bad_settings.py"
    settings_file.write_text("from testproject.settings import *\nBLUEQUE = {'TIMEOUT': -1}\n")
    result = subprocess.run(
        [sys.executable, str(MANAGE), "check", "--settings", "bad_settings"],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=60)
    assert result.returncode != 0
    assert "blueque.E006" in result.stderr
    assert "TIMEOUT" in result.stderr


def test_redis_down_is_not_a_check_error_but_a_clear_error_at_use(settings):
    settings.BLUEQUE = {"URL": "redis://127.0.0.1:1/0"}
    assert check_settings() == []
    with pytest.raises(redis.ConnectionError):
        long_task.enqueue(steps=1)
