"""The docs' code cannot drift from the code (issue 18): the reference pages name every
setting, check id, signal and exported name; every Python block compiles and every ini block
parses; every ``manage.py bq_*`` line is accepted by that command's parser. (The Python
blocks run too: the doctests in test_build.py, the getting-started page in
test_getting_started.py, every other ``code-block:: python`` in test_snippets.py.) Reads the
.rst sources: no Sphinx needed."""

import configparser
import re
import shlex
import textwrap
from pathlib import Path

from django.core.management import load_command_class

import django_blueque
import django_blueque.core
from django_blueque import setting_checks, signals

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def page(name):
    return (DOCS / name).read_text()


def code_blocks(language):
    """[(file, code)] of every ``.. code-block:: <language>`` of the docs."""
    found = []
    for path in sorted(DOCS.rglob("*.rst")):
        pattern = rf"^( *)\.\. code-block:: {language}\n((?:\n|\1   .*\n)+)"
        for _indent, body in re.findall(pattern, path.read_text(), flags=re.M):
            found.append((path.relative_to(DOCS), textwrap.dedent(body).strip("\n")))
    return found


def test_every_setting_is_in_the_settings_reference():
    text = page("reference/settings.rst")
    missing = [key for key in setting_checks.DEFAULTS if f"* - ``{key}``" not in text]
    assert not missing, missing


def test_every_check_id_is_in_the_checks_reference_and_no_other():
    source = "".join(p.read_text() for p in (REPO / "django_blueque").rglob("*.py"))
    used = set(re.findall(r"blueque\.[EW]\d{3}", source))
    documented = set(re.findall(r"\* - ``(blueque\.[EW]\d{3})``", page("reference/checks.rst")))
    assert used and used == documented


def test_every_signal_is_in_the_signals_reference():
    names = [name for name, value in vars(signals).items()
             if type(value).__name__ == "Signal"]
    text = page("reference/signals.rst")
    assert names and all(f"* - ``{name}``" in text for name in names), names


def test_every_exported_name_is_documented():
    api, core = page("reference/api.rst"), page("reference/core.rst")
    for name in django_blueque.__all__:
        assert re.search(rf"^\.\. auto\w+:: {name}$", api, flags=re.M), name
    constants = {status.upper() for status in django_blueque.core.STATUSES} | {"STATUSES"}
    for name in django_blueque.core.__all__:
        documented = re.search(rf"^\.\. auto\w+:: {name}$", core, flags=re.M)
        assert documented or (name in constants and f"``{name}``" in core), name


def test_every_module_of_the_engine_is_named_in_the_architecture_page():
    text = page("explanation/architecture.rst")
    modules = [path.name for path in (REPO / "django_blueque" / "core").glob("*.py")
               if path.name != "__init__.py"]
    assert "admission.py" in modules
    assert not [name for name in modules if name not in text]


def test_every_command_is_in_the_commands_reference():
    commands = sorted(p.stem for p in (REPO / "django_blueque/management/commands")
                      .glob("bq_*.py"))
    text = page("reference/commands.rst")
    assert commands and all(f".. blueque-command:: {name}" in text for name in commands)


def test_every_python_block_compiles_and_every_ini_block_parses():
    python = code_blocks("python")
    assert len(python) >= 15
    for path, code in python:
        compile(code, f"{path}: {code.splitlines()[0]}", "exec")
    ini = code_blocks("ini")
    assert ini
    for _path, code in ini:
        configparser.ConfigParser(interpolation=None, strict=True).read_string(code)


def test_every_command_line_in_the_docs_is_accepted_by_its_parser():
    lines = [(path, line.split("#")[0].strip()) for path, code in code_blocks("sh")
             for line in code.splitlines()]
    lines = [(path, line) for path, line in lines if line.startswith("python manage.py bq_")]
    assert len(lines) >= 5
    for path, line in lines:
        name, *args = shlex.split(line)[2:]
        parser = load_command_class("django_blueque", name).create_parser("manage.py", name)
        try:
            parser.parse_args(args)
        except SystemExit:
            raise AssertionError(f"{path}: {line!r} is refused by {name}'s parser") from None
