"""What the tests run in, found or installed for the one test command (testing.py): the
Python interpreters, the Django versions, a virtualenv for each (Python, Django) pair, and the
system packages the tests use.

The pairs, each in its own virtualenv at the repository root:

* ``.venv-test-py311-djXY``: the newest Python 3.11 found, with the newest Django 5.2 LTS;
* ``.venv-test-py31N-djXY``: the newest Python 3.13 (else 3.12) found, with the newest Django
  6.x its pip can install (asked with ``pip index versions django``).

Interpreters are looked for in pyenv (``$PYENV_ROOT`` or ``~/.pyenv/versions/``), then as
``python3.N`` on PATH, then this interpreter. A missing one is reported loudly and the other
environment still runs.

System packages, installed with apt-get when missing and this is root on Debian (else it says
what to install): ``python3.N-venv`` for a Python that lacks ensurepip (Debian's python3 alone
cannot make virtualenvs), ``redis-server`` (the tests' fixtures start private servers from it;
nothing else is started here), ``gettext`` (a test checks that the translation catalogs cover
every marked string) and ``chromium`` (the browser tests drive it with Playwright; no
browser is downloaded).

Standard library only: this runs before any virtualenv exists.
"""

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def say(message=""):
    print(f"[runtests] {message}" if message else "", flush=True)


def loud(message):
    bar = "!" * 78
    print(f"\n{bar}\n[runtests] {message}\n{bar}\n", flush=True)


class Failure(Exception):
    """A setup step that failed: printed, exit status 2."""


# --- interpreters and Django versions -------------------------------------------------------

def version_key(text):
    return tuple(int(part) for part in text.split("."))


def interpreter_version(python):
    """(major, minor) of a Python that can make virtualenvs, or None."""
    try:
        done = subprocess.run(
            [str(python), "-c", "import sys, venv, ensurepip; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return tuple(int(x) for x in done.stdout.split())


def lacks_venv(python, minor):
    """True when ``python`` is a Python 3.<minor> without venv/ensurepip (Debian splits them
    into python3.<minor>-venv): it is there, and unusable until that package is installed."""
    try:
        done = subprocess.run([str(python), "-c", "import sys; print(*sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.split() == ["3", str(minor)] and interpreter_version(python) is None


def install_venv(python, minor):
    """Install python3.<minor>-venv when root on Debian; else a Failure saying exactly that."""
    package = f"python3.{minor}-venv"
    if not Apt.possible():
        raise Failure(f"{python} is Python 3.{minor} but cannot make virtualenvs (its "
                      f"ensurepip is missing). Install it (Debian/Ubuntu, as root: apt-get "
                      f"install {package}) and run again.")
    Apt.install(package)


def find_python(minor):
    """The newest usable Python 3.<minor>: pyenv's, then python3.<minor> on PATH, then this.
    One that lacks only venv/ensurepip gets it installed (or a Failure says what to do)."""
    candidates = []
    roots = [os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv")]
    for root in dict.fromkeys(r for r in roots if r):
        found = []
        for path in glob.glob(os.path.join(root, "versions", f"3.{minor}.*", "bin", "python3")):
            release = Path(path).parent.parent.name
            if re.fullmatch(rf"3\.{minor}\.\d+", release):
                found.append((version_key(release), path))
        candidates += [path for _, path in sorted(found, reverse=True)]
    for name in (f"python3.{minor}",):
        path = shutil.which(name)
        if path:
            candidates.append(path)
    if sys.version_info[:2] == (3, minor):
        candidates.append(sys.executable)
    for path in candidates:
        if interpreter_version(path) == (3, minor):
            return Path(path)
    for path in candidates:
        if lacks_venv(path, minor):
            install_venv(path, minor)
            if interpreter_version(path) == (3, minor):
                return Path(path)
    return None


def pick_django(python, major, minor=None):
    """(requirement, short name) of the newest Django <major>[.<minor>].x that ``python``'s
    pip can install, asked with ``pip index versions``; a version range if the index cannot
    be asked."""
    wanted = f"{major}.{minor}" if minor is not None else f"{major}"
    try:
        done = subprocess.run([str(python), "-m", "pip", "index", "versions", "django"],
                              capture_output=True, text=True, timeout=180)
        listed = re.search(r"Available versions: (.*)", done.stdout)
    except (OSError, subprocess.TimeoutExpired):
        listed = None
    if listed:
        versions = [v.strip() for v in listed.group(1).split(",")]
        finals = [v for v in versions if re.fullmatch(r"\d+(\.\d+)+", v)]
        matching = [v for v in finals if v == wanted or v.startswith(wanted + ".")]
        if matching:
            best = max(matching, key=version_key)
            short = "".join(best.split(".")[:2])
            return f"Django=={best}", short
    upper = f"{major}.{minor + 1}" if minor is not None else f"{major + 1}"
    say(f"could not ask the index for Django versions with {python}: using Django>={wanted},"
        f"<{upper}")
    return f"Django>={wanted},<{upper}", wanted.replace(".", "") + ("x" if minor is None else "")


class Env:
    """One (Python, Django) pair and its virtualenv."""

    def __init__(self, python, django_requirement, django_short):
        self.base_python = python
        version = interpreter_version(python)
        self.python_short = f"{version[0]}{version[1]}"
        self.django_requirement = django_requirement
        self.key = f"py{self.python_short}-dj{django_short}"
        self.dir = REPO / f".venv-test-{self.key}"
        self.python = self.dir / "bin" / "python"
        self.stamp = self.dir / ".runtests-installed"
        self.extras = "test"
        self.markexpr = None
        self.seconds = None
        self.counts = None
        self.returncode = None

    def fingerprint(self):
        digest = hashlib.sha256()
        for name in ("setup.cfg", "pyproject.toml"):
            path = REPO / name
            digest.update(path.read_bytes() if path.exists() else b"")
        digest.update(self.django_requirement.encode())
        digest.update(self.extras.encode())
        digest.update(str(self.base_python).encode())
        return digest.hexdigest()

    def usable(self):
        try:
            return subprocess.run([str(self.python), "-c", "import django, pytest, xdist"],
                                  capture_output=True).returncode == 0
        except OSError:
            return False

    def install(self, no_install):
        if no_install:
            if not self.usable():
                raise Failure(f"{self.dir} is missing or incomplete; run without --no-install")
            return
        if self.stamp.exists() and self.stamp.read_text() == self.fingerprint() \
                and self.usable():
            say(f"{self.key}: up to date ({self.dir.name})")
            return
        started = time.monotonic()
        if not self.python.exists() or subprocess.run(
                [str(self.python), "-c", "pass"], capture_output=True).returncode != 0:
            say(f"{self.key}: creating {self.dir.name} with {self.base_python}")
            run([self.base_python, "-m", "venv", "--clear", self.dir], "creating a virtualenv")
        say(f"{self.key}: installing -e .[{self.extras}] and {self.django_requirement}")
        run([self.python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
             "-q", "-e", f"{REPO}[{self.extras}]", self.django_requirement],
            f"pip install ({self.key})")
        self.stamp.write_text(self.fingerprint())
        say(f"{self.key}: installed in {time.monotonic() - started:.0f} s")

    def describe(self):
        done = subprocess.run([str(self.python), "-c",
                               "import sys, django; print(sys.version.split()[0], "
                               "django.get_version())"], capture_output=True, text=True)
        python, django = (done.stdout.split() + ["?", "?"])[:2]
        return f"Python {python}, Django {django}"


def run(cmd, what, **kwargs):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise Failure(f"{what} failed (exit {done.returncode}): "
                      f"{' '.join(str(c) for c in cmd)}\n{done.stdout[-6000:]}"
                      f"{done.stderr[-6000:]}")
    return done


def find_python_or_say(minor):
    try:
        return find_python(minor)
    except Failure as exc:
        loud(str(exc))
        return None


def find_envs(only):
    envs = []
    py311 = find_python_or_say(11)
    if py311:
        envs.append(Env(py311, *pick_django(py311, 5, 2)))
    else:
        loud("NO PYTHON 3.11 FOUND (pyenv, python3.11 on PATH): the Python 3.11 + Django 5.2 "
             "environment is SKIPPED.")
    newest = find_python_or_say(13) or find_python_or_say(12)
    if newest:
        envs.append(Env(newest, *pick_django(newest, 6)))
    else:
        loud("NO PYTHON 3.13 OR 3.12 FOUND (pyenv, python3.13/python3.12 on PATH): the newest "
             "Django 6.x environment is SKIPPED; only Python 3.11 + Django 5.2 is tested.")
    if only:
        envs = [env for env in envs if any(key in env.key for key in only)]
    if not envs:
        raise Failure("no test environment to run (no Python 3.11, 3.12 or 3.13 found, or "
                      "--env matched none)")
    return envs


# --- system packages ------------------------------------------------------------------------

class Apt:
    updated = False

    @classmethod
    def possible(cls):
        return os.geteuid() == 0 and shutil.which("apt-get") is not None

    @classmethod
    def install(cls, package):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if not cls.updated:
            say("apt-get update ...")
            run(["apt-get", "update", "-qq"], "apt-get update", env=env)
            cls.updated = True
        say(f"apt-get install -y {package} ...")
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
            f"apt-get install {package}", env=env)


def chromium_path():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def ensure_system_packages(need_browser):
    if not shutil.which("redis-server"):
        if os.environ.get("BLUEQUE_TEST_REDIS_URL"):
            loud("redis-server is not on PATH: the tests use BLUEQUE_TEST_REDIS_URL, but the "
                 "ones that restart a server will fail.")
        elif Apt.possible():
            Apt.install("redis-server")
        else:
            raise Failure("redis-server is not on PATH and cannot be installed here (not root, "
                          "or no apt-get). Install it (Debian/Ubuntu: apt-get install "
                          "redis-server) and run again; the tests start private servers "
                          "from it.")
    if need_browser and not chromium_path():
        if Apt.possible():
            Apt.install("chromium")
        else:
            loud("chromium is not installed and cannot be installed here (not root, or no "
                 "apt-get): the browser tests will fail. Install Debian's chromium, or skip "
                 "them with --fast or -- -m 'not browser'.")
    if not shutil.which("msgmerge"):  # the check that the translation catalogs are complete
        if Apt.possible():
            Apt.install("gettext")
        else:
            loud("gettext is not installed and cannot be installed here (not root, or no "
                 "apt-get): the test that the translations cover every string is skipped. "
                 "Install Debian's gettext.")
    chromium = chromium_path()
    say(f"redis-server: {shutil.which('redis-server') or '(none)'}; chromium: "
        f"{chromium or '(none)'}; gettext: {shutil.which('msgmerge') or '(none)'}")
