"""The tutorial, followed word for word by a new user (issue 18): the code blocks of
docs/tutorial/getting-started.rst, applied in order to a brand-new ``django-admin
startproject`` as tests/newuser/test_readme.py does for the README. The task it enqueues runs
in the listener it starts, the shell prints the result the page promises, and the tests it
writes pass."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.newuser.test_readme import Project, commands

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "tutorial" / "getting-started.rst"


def page_blocks():
    """[(language, code)] of the page's code blocks, in order."""
    found = re.findall(r"^\.\. code-block:: (\w+)\n((?:\n|   .*\n)+)", PAGE.read_text(),
                       flags=re.M)
    return [(language, textwrap.dedent(body).strip("\n") + "\n") for language, body in found]


@pytest.fixture
def project(tmp_path, redis_url):
    made = Project(tmp_path, redis_url)
    yield made
    made.stop()


def test_the_getting_started_page_works_verbatim_in_a_new_project(project):
    blocks = page_blocks()
    assert [language for language, _ in blocks] == ["sh", "python", "python", "sh", "python",
                                                    "python", "sh"]
    printed = []
    for language, code in blocks:
        if language == "sh":
            for line in commands(code):
                if line.startswith("python manage.py test"):
                    ran = subprocess.run([sys.executable, *line.split()[1:]], cwd=project.root,
                                         env=project.env, capture_output=True, text=True,
                                         timeout=180)
                    assert ran.returncode == 0, ran.stdout + ran.stderr
                    printed.append(ran.stderr)
                else:
                    project.command(line)
        elif not project.write_file_block(code):
            printed.append(project.shell(code))
    assert printed[0].strip().splitlines()[-1] == "complete {'video_id': 42, 'ok': True}", printed
    assert re.search(r"^Ran 1 test in .*\n\nOK$", printed[1], flags=re.M), printed[1]
