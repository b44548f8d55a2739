"""What test_snippets.py needs to run the docs' Python blocks in a new project: the blocks of
a page (each with the reason it is not run, if the page gives one), and a project with one app,
``yourapp``, whose ``tasks.py`` a page's blocks fill, against the test's private Redis.

A block that cannot run is excused in the page itself, with an rst comment (invisible on the
site) just before it::

    .. not-run: a fragment of a systemd unit, not Python
"""

import ast
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.newuser.test_readme import Project

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^(?:\.\. not-run:(?P<reason>.*)\n\n)?\.\. code-block:: python\n"
                   r"(?P<body>(?:\n|   .*\n)+)", flags=re.M)
DOCTEST = r"^\.\. doctest:: {group}\n((?:\n|   .*\n)+)"


@dataclass
class Block:
    page: str
    line: int
    code: str
    excuse: str | None  # why it is not run; None: it must run

    def __str__(self):
        return f"{self.page}:{self.line}"


def python_blocks(page):
    """Every ``.. code-block:: python`` of docs/<page>, in order."""
    text = (DOCS / page).read_text()
    return [Block(page, text.count("\n", 0, m.start()) + 1,
                  textwrap.dedent(m.group("body")).strip("\n") + "\n",
                  m.group("reason").strip() if m.group("reason") is not None else None)
            for m in BLOCK.finditer(text)]


def pages_with_python():
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.rst")
                  if "code-block:: python" in p.read_text())


class Blocks:
    """The blocks of a page that must run, handed out in order; ``unused()`` lists the rest."""

    def __init__(self, page):
        self.pending = [block for block in python_blocks(page) if block.excuse is None]

    def take(self):
        assert self.pending, "the scenario runs more blocks than the page has"
        return self.pending.pop(0).code

    def unused(self):
        return [str(block) for block in self.pending]


def doctest_definitions(page, group):
    """The imports and functions defined by the ``.. doctest:: <group>`` block(s) of a page, as
    module source: a task that a doctest defines can then run in a real listener."""
    source = []
    for body in re.findall(DOCTEST.format(group=group), (DOCS / page).read_text(), flags=re.M):
        source += [line[4:] for line in textwrap.dedent(body).splitlines()
                   if line.startswith((">>> ", "... "))]
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef)
    tree = ast.parse("\n".join(source))
    return "\n\n".join(ast.unparse(node) for node in tree.body if isinstance(node, keep)) + "\n"


def split_definitions(code):
    """(imports and definitions, the other statements) of a block, as two sources of whole
    lines."""
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    lines = code.splitlines()
    parts = ({}, {})  # line number: line, in order, each line once
    for node in ast.parse(code).body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        for number in range(first, node.end_lineno + 1):
            parts[not isinstance(node, keep)][number] = lines[number - 1]
    return tuple("\n".join(part.values()) + "\n" for part in parts)


class DocsProject(Project):
    """A ``startproject`` with django_blueque and ``yourapp`` installed, on the test's Redis."""

    def __init__(self, root, redis_url):
        super().__init__(root, redis_url)
        (root / "yourapp").mkdir()
        (root / "yourapp" / "__init__.py").write_text("")
        self.tasks = ""
        self.set_tasks("")
        self.add_settings('INSTALLED_APPS += ["django_blueque", "yourapp"]\n'
                          f'BLUEQUE = {{"URL": {redis_url!r}}}\n')

    @property
    def settings(self):
        return self.root / "mysite" / "settings.py"

    def add_settings(self, code):
        """Append to settings.py; the test's Redis URL stays the one used."""
        self.settings.write_text(f"{self.settings.read_text()}\n{code}\n"
                                 f"BLUEQUE['URL'] = {self.redis_url!r}\n")

    def set_tasks(self, code):
        self.tasks = code
        (self.root / "yourapp" / "tasks.py").write_text(code)

    def add_tasks(self, code):
        self.set_tasks(f"{self.tasks}\n{code}")

    def shell(self, code):
        """Run ``code`` in ``manage.py shell`` with yourapp.tasks' names imported."""
        return self.run(sys.executable, "manage.py", "shell", "-v", "0", "-c",
                        f"from yourapp.tasks import *\n{code}")

    def burst(self):
        """``bq_listen --burst``: run every task queued, then return."""
        return self.run(sys.executable, "manage.py", "bq_listen", "--burst", "--noreload",
                        "--log-level", "WARNING")

    def listen(self, *options):
        """A ``bq_listen`` (with ``options``) left running until the test ends."""
        self.background.append(subprocess.Popen(
            [sys.executable, "manage.py", "bq_listen", "--noreload", *options], cwd=self.root,
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True))
