"""Passwords are never shown (issue 13, item 5): not by the system checks, the commands' errors,
the ImproperlyConfigured of a request, nor the demo; the demo's secret files are private."""

import os
import signal
import stat
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_blueque import conf, setting_checks
from django_blueque.redacted import masked_url
from tests.packaging.test_demo import Demo

SECRET = "s3cret-Pa55"


@pytest.mark.parametrize("url, shown", [
    (f"redis://:{SECRET}@host:6379/0", "redis://:***@host:6379/0"),
    (f"rediss://user:{SECRET}@host/1", "rediss://user:***@host/1"),
    (f"unix://:{SECRET}@/run/redis.sock?db=2", "unix://:***@/run/redis.sock?db=2"),
    (f"redis://host/0?db=1&password={SECRET}", "redis://host/0?db=1&password=***"),
    (f"http://:{SECRET}@host:notaport/0", "http://:***@host:notaport/0"),
    (f"redis://[::1:{SECRET}@x", "redis://***@x"),  # not parseable
    ("redis://user@host:6379/0", "redis://user@host:6379/0"),
])
def test_masked_url_hides_the_password_only(url, shown):
    assert masked_url(url) == shown


def test_the_url_check_and_the_error_of_a_request_hide_the_password(settings):
    settings.BLUEQUE = {"URL": f"http://:{SECRET}@localhost:6379/0"}
    [problem] = setting_checks.problems()
    assert problem.id == "blueque.E004" and SECRET not in problem.msg
    assert "http://:***@localhost:6379/0" in problem.msg
    with pytest.raises(ImproperlyConfigured) as caught:
        conf.get_settings()
    assert SECRET not in str(caught.value) and "***" in str(caught.value)


def test_a_url_that_is_not_a_string_is_named_by_its_type(settings):
    settings.BLUEQUE = {"URL": {"password": SECRET}}
    [problem] = setting_checks.problems()
    assert problem.msg == "BLUEQUE['URL'] is not a Redis URL: of type dict, not a string."


def test_commands_hide_the_password(manage):
    manage.env["BLUEQUE_URL"] = f"http://:{SECRET}@localhost:6379/0"
    done = manage.run("bq_status")
    assert done.returncode != 0
    assert SECRET not in done.stdout + done.stderr
    assert "blueque.E004" in done.stderr and "***" in done.stderr


@pytest.fixture
def password_url(redis_server, redis_url, r):
    """The private Redis through a user with a password (an ACL user: the default user and
    the other tests are untouched)."""
    r.execute_command("ACL", "SETUSER", "demo", "on", f">{SECRET}", "~*", "&*", "+@all")
    yield redis_url.replace("redis://", f"redis://demo:{SECRET}@")
    r.execute_command("ACL", "DELUSER", "demo")


@pytest.mark.slow
@pytest.mark.django_agnostic
def test_the_demo_hides_the_password_and_keeps_its_secrets_private(tmp_path, password_url):
    demo = Demo(tmp_path, "--grace", "1", env_extra={"BLUEQUE_URL": password_url})
    try:
        demo.wait_for(r"The demo is running", 120)
        data = tmp_path / "demo-data"
        for name in ("secret_key", "admin-credentials.txt", "db.sqlite3"):
            mode = stat.S_IMODE((data / name).stat().st_mode)
            assert mode == 0o600, f"{name}: {oct(mode)}"
    except BaseException:
        demo.kill()
        raise
    assert demo.stop(signal.SIGTERM) == 0, demo.output
    assert "using the Redis of BLUEQUE_URL: redis://demo:***@" in demo.output
    assert SECRET not in demo.output
    logs = "".join(path.read_text(errors="replace") for path in
                   (tmp_path / "demo-data" / "logs").glob("*.log"))
    assert SECRET not in logs


def test_the_demo_imports_only_the_standard_library_from_the_package():
    code = ("import sys; sys.argv = ['rundemo.py', '--help']; import runpy; "
            "runpy.run_path('rundemo.py', run_name='__main__')")
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))))
    assert "usage: rundemo.py" in done.stdout, done.stderr
