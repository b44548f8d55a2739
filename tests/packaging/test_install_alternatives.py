"""The README's ways to install before django-blueque is on PyPI, and its one command that
builds the documentation, each run as written (issue 42, items 1 and 2): in a copy of the
repository (a checkout), with a fresh virtualenv's ``pip`` and ``python`` first on the PATH.

Slow (fresh virtualenvs, packages from the index): skipped by ``runtests.py --fast``."""

import os
import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.django_agnostic]  # packaging: one environment


def readme_section(title):
    text = (REPO / "README.md").read_text()
    section = text[text.index(f"## {title}\n"):]
    return section[:section.index("\n## ", 4)]


def sh_blocks(title):
    return re.findall(r"^```sh\n(.*?)^```$", readme_section(title), flags=re.S | re.M)


@pytest.fixture
def checkout(tmp_path):
    """The repository's files (committed or not, without what .gitignore ignores), as a clone
    would have them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split("\0")
    root = tmp_path / "django_blueque"
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    return root


def fresh_env(where):
    """A new virtualenv with pip, and the environment of a shell that activated it."""
    env_dir = where / "venv"
    venv.create(env_dir, with_pip=True, clear=True)
    drop = ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(VIRTUAL_ENV=str(env_dir), PATH=f"{env_dir / 'bin'}:/usr/bin:/bin")
    return env_dir, env


def run_as_written(block, cwd, env):
    for line in block.splitlines():
        done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def installed_module(env_dir, env, cwd):
    done = subprocess.run([str(env_dir / "bin" / "python"), "-c",
                           "import django_blueque; print(django_blueque.__file__)"],
                          cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


def test_the_readme_gives_both_ways_to_install_from_a_checkout():
    blocks = sh_blocks("Installing from a checkout")
    assert len(blocks) == 2
    assert "pip install ." in blocks[0]
    assert "python -m build" in blocks[1] and "pip install dist/" in blocks[1]
    assert "not on PyPI yet" in readme_section("Install into an existing project")


@pytest.mark.parametrize("which", [0, 1], ids=["from the checkout", "from a built wheel"])
def test_each_way_to_install_from_a_checkout_works_as_written(checkout, tmp_path, which):
    env_dir, env = fresh_env(tmp_path)
    run_as_written(sh_blocks("Installing from a checkout")[which], checkout, env)
    module = installed_module(env_dir, env, tmp_path)
    assert env_dir in module.parents, module  # installed, not the checkout's own files
    assert (module.parent / "templates" / "django_blueque" / "dashboard.html").is_file()
    assert (module.parent / "locale" / "fr" / "LC_MESSAGES" / "django.mo").is_file()


def test_the_docs_build_with_one_command_and_warnings_as_errors(checkout, tmp_path):
    """With the docs extra only (no test dependency): on this Python, 3.11, pip picks Django
    5.2, whose Tasks framework is the django-tasks backport that autodoc needs."""
    [block] = sh_blocks("Documentation")
    assert "-W" in block
    _env_dir, env = fresh_env(tmp_path)
    run_as_written(block, checkout, env)
    assert (checkout / "docs" / "_build" / "html" / "reference" / "tasks-backend.html").is_file()
