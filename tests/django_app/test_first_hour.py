"""The usual first-hour mistakes each end in a message naming the problem and its fix, never
in a silent fallback (issue 42)."""

import datetime
from pathlib import Path

import pytest
import redis
from demo.tasks import long_task, report
from django.contrib.auth.models import User

from devtools.servers import RedisServer
from django_blueque import RedisUnavailable, blueque_task, get_result

ENQUEUE = "from demo.tasks import long_task; print(long_task.enqueue(steps=1))"


def run_with_settings(manage, tmp_path, settings_code, *args):
    (tmp_path / "first_hour_settings.py").write_text(
        f"from testproject.settings import *\n{settings_code}\n")
    manage.env["PYTHONPATH"] = str(tmp_path)
    return manage.run(*args, "--settings", "first_hour_settings")


def test_enqueue_without_the_app_installed_says_to_add_it_and_writes_nothing(
        manage, tmp_path, r):
    result = run_with_settings(
        manage, tmp_path, "INSTALLED_APPS = [a for a in INSTALLED_APPS if a != 'django_blueque']",
        "shell", "-c", ENQUEUE)
    assert result.returncode != 0
    assert ("ImproperlyConfigured: 'django_blueque' is not in INSTALLED_APPS" in
            result.stderr.splitlines()[-1])
    assert "Add 'django_blueque' to INSTALLED_APPS." in result.stderr
    assert r.dbsize() == 0


def test_enqueue_with_the_app_installed_writes_the_task(manage, tmp_path, r):
    result = run_with_settings(manage, tmp_path, "", "shell", "-c", ENQUEUE)
    assert result.returncode == 0, result.stderr
    assert r.hget(f"blueque_task_{result.stdout.split()[-1]}", "status") == "pending"




DOWN = "BLUEQUE = {'URL': 'redis://:s3cret@127.0.0.1:1/0'}"


@pytest.mark.parametrize("call", [
    "long_task.enqueue(steps=1)",
    "long_task.schedule(datetime.timedelta(hours=1), steps=1)",
    "get_result('some-id')",
    "cancel('some-id')",
])
def test_a_producer_without_redis_gets_one_exception_naming_the_setting(manage, tmp_path, call):
    result = run_with_settings(
        manage, tmp_path, DOWN, "shell", "-c",
        "import datetime\nfrom demo.tasks import long_task\n"
        f"from django_blueque import cancel, get_result\n{call}")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django_blueque.unreachable.RedisUnavailable: Blueque's Redis does "
                           "not answer: BLUEQUE['URL'] = redis://:***@127.0.0.1:1/0 ("), last
    assert "s3cret" not in result.stderr
    assert "During handling" not in result.stderr  # not redis-py's traceback as well
    assert "/redis/" not in result.stderr, result.stderr  # no frame of redis-py's


@pytest.mark.parametrize("refusal", ["full", "replica"])
def test_a_redis_that_cannot_take_a_write_is_unavailable_too(settings, refusal):
    """A full Redis (maxmemory, noeviction) or one that became a replica refuses the enqueue;
    the view that catches RedisUnavailable to answer 503 catches that too, nothing written."""
    server = RedisServer().start()
    try:
        settings.BLUEQUE = {"URL": server.url}
        admin = redis.Redis.from_url(server.url)
        if refusal == "full":
            admin.config_set("maxmemory-policy", "noeviction")
            admin.config_set("maxmemory", 1)
        else:
            admin.replicaof("127.0.0.1", 1)  # a primary that never answers: it stays read-only
        said = "cannot take this now" if refusal == "full" else "is a replica now"
        with pytest.raises(RedisUnavailable, match=said):
            long_task.enqueue(steps=1)
        admin.config_set("maxmemory", 0)
        admin.replicaof("no", "one")
        assert admin.dbsize() == 0
    finally:
        server.close()


def test_the_exception_is_caught_as_documented(settings):
    settings.BLUEQUE = {"URL": "redis://127.0.0.1:1/0"}
    with pytest.raises(RedisUnavailable, match=r"BLUEQUE\['URL'\] = redis://127.0.0.1:1/0"):
        long_task.enqueue(steps=1)
    with pytest.raises(redis.ConnectionError):  # what code written before it catches
        long_task.enqueue(steps=1)


@pytest.mark.parametrize("value", [User(pk=3, username="ada"), [User(pk=3, username="ada")]])
def test_a_model_instance_argument_is_refused_with_pass_its_pk(blueque, r, value):
    with pytest.raises(TypeError, match=r"argument 'title' cannot be encoded as JSON: it is a "
                                        r"model instance \(User\): pass its pk and fetch the row"):
        report.enqueue(title=value)
    assert r.dbsize() == 0


@blueque_task(queue="tests.first_hour.kind")
def kind_of(when):
    return f"{type(when).__name__} {when}"


def test_a_datetime_argument_arrives_as_its_iso_string_as_the_readme_says(settings):
    settings.BLUEQUE = {"EAGER": True}  # the same JSON round trip as through Redis
    moment = datetime.datetime(2026, 11, 29, 4, 30, tzinfo=datetime.UTC)
    assert kind_of(moment) == "datetime 2026-11-29 04:30:00+00:00"  # inline: a plain call
    assert get_result(kind_of.enqueue(moment)).result == "str 2026-11-29T04:30:00Z"
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "a `datetime` arrives as its ISO string" in readme
    assert "pass its pk" in readme
