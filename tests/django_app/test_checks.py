"""Every mistake in the BLUEQUE setting is a system check error with an id and a hint (a part
of it that is ignored, a warning)."""

import subprocess
import sys

import pytest
import redis
from demo.tasks import long_task
from django.core import checks
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
    ("timings not a dict", {"TIMINGS": 15}, "blueque.E018"),
    ("timings key misspelt", {"TIMINGS": {"LEASES": 30}}, "blueque.E018"),
    ("lease not a number", {"TIMINGS": {"LEASE": "30"}}, "blueque.E018"),
    ("retry too long for the lease", {"TIMINGS": {"LEASE": 3, "RETRY": 2}}, "blueque.E018"),
    ("memory limit without a unit", {"MEMORY_LIMIT": "2 gigs"}, "blueque.E027"),
    ("memory limit negative", {"MEMORY_LIMIT": -1}, "blueque.E027"),
    ("queue memory limit a float", {"QUEUES": {"q": {"MEMORY_LIMIT": 1.5}}}, "blueque.E027"),
    ("cpu limit a string", {"CPU_LIMIT": "3600"}, "blueque.E028"),
    ("queue cpu limit zero", {"QUEUES": {"q": {"CPU_LIMIT": 0}}}, "blueque.E028"),
    ("max running zero", {"QUEUES": {"q": {"MAX_RUNNING": 0}}}, "blueque.E029"),
    ("max running a string", {"QUEUES": {"q": {"MAX_RUNNING": "2"}}}, "blueque.E029"),
    ("max running per key a float", {"QUEUES": {"q": {"MAX_RUNNING_PER_KEY": 1.5}}},
     "blueque.E029"),
    ("rate limit per day", {"QUEUES": {"q": {"RATE_LIMIT": "30/d"}}}, "blueque.E029"),
    ("rate limit a number", {"QUEUES": {"q": {"RATE_LIMIT": 30}}}, "blueque.E029"),
    ("rate limit of no start", {"QUEUES": {"q": {"RATE_LIMIT": "0/m"}}}, "blueque.E029"),
    ("queue lease shorter", {"QUEUES": {"q": {"LEASE": 10}}}, "blueque.E030"),
    ("queue lease below TIMINGS'", {"TIMINGS": {"LEASE": 60}, "QUEUES": {"q": {"LEASE": 30}}},
     "blueque.E030"),
    ("queue lease a string", {"QUEUES": {"q": {"LEASE": "600"}}}, "blueque.E030"),
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


@pytest.mark.parametrize("key,hint", [
    ("CONCURENCY", "Did you mean 'CONCURRENCY'?"),
    ("url", "Did you mean 'URL'?"),
    ("RETRY", "Did you mean 'RETRIES'?"),
    ("SHELF", "Known keys: URL, CACHE, "),
])
def test_a_misspelt_key_gets_the_nearest_known_one(settings, key, hint):
    settings.BLUEQUE = {"URL": "redis://localhost/0", key: 2}
    [error] = check_settings()
    assert error.id == "blueque.E002" and repr(key) in error.msg
    assert error.hint.startswith(hint)


def test_good_settings_pass(settings):
    settings.BLUEQUE = {"URL": "rediss://:secret@redis.example:6380/2", "PREFIX": "blueque",
                        "RETRIES": 3, "BACKOFF": 20, "TIMEOUT": None, "RETENTION": 3600,
                        "QUEUES": {"video.encode": {"TIMEOUT": 7200, "RETRIES": 1,
                                                    "LEASE": 120}},
                        "OPTIONS": {"socket_timeout": 5, "health_check_interval": 30}}
    assert check_settings() == []
    conf_settings = conf.get_settings()
    assert conf_settings.policy("video.encode") == {"retries": 1, "backoff": 20,
                                                    "timeout": 7200, "retention": 3600}
    assert conf_settings.policy("other")["retries"] == 3
    assert conf_settings.lease("video.encode") == {"lease": 120}
    assert conf_settings.lease("other") == {}


def test_limits_of_the_decorator_over_the_queue_over_the_global_setting(settings):
    from django_blueque.services import run_policy

    settings.BLUEQUE = {"MEMORY_LIMIT": "1G", "CPU_LIMIT": 600,
                        "QUEUES": {"demo.bounded": {"MEMORY_LIMIT": "4G"},
                                   "demo.report": {"CPU_LIMIT": None, "MEMORY_LIMIT": "2G"}}}
    assert check_settings() == []
    # demo.bounded's decorator says memory_limit="256M", cpu_limit=60
    assert run_policy("demo.bounded")["memory_limit"] == 256 * 1024**2
    assert run_policy("demo.bounded")["cpu_limit"] == 60
    report_policy = run_policy("demo.report")  # its queue's, None for no CPU limit
    assert report_policy["memory_limit"] == 2 * 1024**3 and "cpu_limit" not in report_policy
    assert run_policy("demo.long")["memory_limit"] == 1024**3
    assert run_policy("demo.long")["cpu_limit"] == 600


def test_options_host_and_port_with_sentinels_are_a_warning(settings):
    """Sentinel names the primary's address: a host or port in OPTIONS (issue 38: a decoy's)
    is reported (test_failover.py shows that no connection goes there)."""
    settings.BLUEQUE = {"SENTINELS": [("127.0.0.1", 1)], "SERVICE_NAME": "mymaster",
                        "OPTIONS": {"host": "127.0.0.1", "port": 6400, "socket_timeout": 5}}
    messages = check_settings()
    assert [(message.id, message.level) for message in messages] == [
        ("blueque.W002", checks.WARNING)]
    assert "host and port" in messages[0].msg and messages[0].hint
    assert conf.get_settings().options["socket_timeout"] == 5  # a warning, not an error
    settings.BLUEQUE = {**settings.BLUEQUE, "OPTIONS": {"socket_timeout": 5}}
    assert check_settings() == []


def test_the_timings_setting_reaches_the_engine(settings):
    settings.BLUEQUE = {"URL": "redis://127.0.0.1:1/0", "TIMINGS": {"LEASE": 60, "CONFIRM": 20}}
    assert check_settings() == []
    timings = conf.get_client().protocol.timings
    assert (timings.lease, timings.confirm, timings.heartbeat) == (60, 20, 15)
    assert timings.renew_every == 20


def test_no_setting_is_a_warning_naming_the_default_redis(settings):
    del settings.BLUEQUE
    [warning] = check_settings()
    assert (warning.id, warning.level) == ("blueque.W003", checks.WARNING)
    assert "redis://localhost:6379/0" in warning.msg and "BLUEQUE =" in warning.hint
    assert conf.get_settings().url == "redis://localhost:6379/0"
    assert conf.redis_in_use() == ("redis://localhost:6379/0 (the default: settings.BLUEQUE "
                                   "is not set)")


def test_a_misspelt_setting_name_is_named_in_the_warning(settings):
    del settings.BLUEQUE
    settings.BLUEQUE_SETTINGS = {"URL": "redis://redis.example:6379/0"}
    [warning] = check_settings()
    assert warning.id == "blueque.W003"
    assert warning.hint == "Rename BLUEQUE_SETTINGS to BLUEQUE."


@pytest.mark.parametrize("setting,shown", [
    ({"URL": "redis://:s3cret@redis.example:6380/2"},
     "BLUEQUE['URL'] = redis://:***@redis.example:6380/2"),
    ({"RETRIES": 2}, "redis://localhost:6379/0 (the default: BLUEQUE has no URL)"),
    ({"SENTINELS": [("sentinel-1", 26379)], "SERVICE_NAME": "mymaster"},
     "BLUEQUE['SENTINELS'] = [('sentinel-1', 26379)], service 'mymaster'"),
])
def test_the_redis_in_use_is_named_with_its_password_masked(settings, setting, shown):
    settings.BLUEQUE = setting
    assert conf.redis_in_use() == shown


def test_a_command_first_log_line_names_its_redis_without_the_password(tmp_path):
    settings_file = tmp_path / "down_settings.py"
    settings_file.write_text("from testproject.settings import *\n"
                             "BLUEQUE = {'URL': 'redis://:s3cret@127.0.0.1:1/0'}\n")
    result = subprocess.run(
        [sys.executable, str(MANAGE), "bq_schedule", "--once", "--settings", "down_settings"],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=60)
    assert result.returncode != 0
    first = result.stderr.splitlines()[0]
    assert "bq_schedule uses Redis BLUEQUE['URL'] = redis://:***@127.0.0.1:1/0" in first
    assert "s3cret" not in result.stderr


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
    with pytest.raises(redis.ConnectionError):  # RedisUnavailable is one
        long_task.enqueue(steps=1)


def test_each_bad_limit_of_a_queue_is_its_own_error_naming_its_key(settings):
    settings.BLUEQUE = {"URL": "redis://localhost/0",
                        "QUEUES": {"q": {"MAX_RUNNING": "2", "RATE_LIMIT": "30/d"}}}
    problems = [error for error in check_settings() if error.id == "blueque.E029"]
    assert [error.msg.split(": ")[0] for error in problems] == [
        "BLUEQUE['QUEUES']['q']['MAX_RUNNING']", "BLUEQUE['QUEUES']['q']['RATE_LIMIT']"]
    assert "'2'" in problems[0].msg and "'30/d'" in problems[1].msg
