"""Code written for blueque 1.0, run unchanged against the real blueque 1.0.1 and against our
engine (through a ``blueque`` package that only re-exports django_blueque.core): blueque's own
integration test (blueque1/upstream, vendored unmodified) and our black-box tests of what 1.0's
unit tests pin (blueque1/behaviour.py). Each test runs in a fresh process (harness.py): the
files fork, and a listener lives as long as its process."""

import ast
import os
import subprocess
import sys

import pytest

from tests.interop.conftest import bq1_env, ours_env
from tests.interop.helpers import HERE

SUITES = HERE / "blueque1"
HARNESS = SUITES / "harness.py"
FILES = [SUITES / "upstream" / "test_integration.py", SUITES / "behaviour.py"]


def unittest_ids(path):
    """Class.method of every test method of the TestCase classes in a file."""
    tree = ast.parse(path.read_text())
    return [f"{node.name}.{item.name}" for node in tree.body if isinstance(node, ast.ClassDef)
            for item in node.body
            if isinstance(item, ast.FunctionDef) and item.name.startswith("test")]


CASES = [pytest.param(path, test_id, id=f"{path.stem}:{test_id}")
         for path in FILES for test_id in unittest_ids(path)]


def run_harness(argv, env, redis_url):
    done = subprocess.run([*map(str, argv)], capture_output=True, text=True, timeout=180,
                          env={**env, "REDIS_URI": redis_url})
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"


def test_every_file_has_tests():
    assert all(unittest_ids(path) for path in FILES)
    assert len(unittest_ids(FILES[0])) == 4  # blueque's integration test, unmodified


@pytest.mark.parametrize("path, test_id", CASES)
def test_on_the_engine(redis_url, path, test_id):
    run_harness([sys.executable, HARNESS, "--engine", path, test_id], ours_env(), redis_url)


@pytest.mark.interop
@pytest.mark.parametrize("path, test_id", CASES)
def test_on_blueque_1_0_1(bq1_python, redis_url, path, test_id):
    run_harness([bq1_python, "-I", HARNESS, path, test_id], bq1_env(), redis_url)


def test_the_shim_only_re_exports_the_engine():
    code = ("import blueque, django_blueque.core as core; "
            "from blueque.forking_runner import ForkingRunner; "
            "assert ForkingRunner is core.ForkingRunner; "
            "assert all(getattr(blueque, n) is getattr(core, n) for n in core.__all__)")
    env = ours_env()
    env["PYTHONPATH"] = os.pathsep.join([str(SUITES / "shim"), env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
