"""runtests.py on a fresh Debian whose python3 lacks ensurepip (issue 13, item 4): it says
exactly what to install (or installs it when root), instead of "NO PYTHON 3.11 FOUND"."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtests():
    spec = importlib.util.spec_from_file_location("runtests_under_test",
                                                  REPO / "devtools" / "testing_envs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def python_without_ensurepip(tmp_path):
    """This interpreter as Debian's python3 without python3.X-venv: ``import ensurepip``
    fails in it (a module of that name, first on its path, raises ImportError)."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "ensurepip.py").write_text("raise ImportError('No module named ensurepip')\n")
    wrapper = tmp_path / "python3"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={shadow} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_a_python_without_ensurepip_is_told_apart(runtests, python_without_ensurepip):
    minor = sys.version_info.minor
    assert runtests.interpreter_version(python_without_ensurepip) is None
    assert runtests.lacks_venv(python_without_ensurepip, minor)
    assert not runtests.lacks_venv(sys.executable, minor)  # it has venv and ensurepip
    assert not runtests.lacks_venv(python_without_ensurepip, minor + 1)


def test_without_root_it_says_exactly_what_to_install(runtests, python_without_ensurepip,
                                                      monkeypatch):
    monkeypatch.setattr(runtests.Apt, "possible", classmethod(lambda cls: False))
    minor = sys.version_info.minor
    with pytest.raises(runtests.Failure) as caught:
        runtests.install_venv(python_without_ensurepip, minor)
    assert f"apt-get install python3.{minor}-venv" in str(caught.value)
    assert "ensurepip is missing" in str(caught.value)
