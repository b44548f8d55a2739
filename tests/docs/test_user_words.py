"""User documentation speaks to users (issue 42, items 2 and 3): no commit hashes, no
project-internal names ("seed 003"), no path outside the package in a docstring, no markup
that renders as literal backticks; and the Troubleshooting page covers the first-hour
errors, each by what the user sees."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_DOCS = sorted((REPO / "docs").rglob("*.rst")) + [REPO / "README.md"]
# a hex word with letters and digits, not part of a UUID (8c3e0b1a-...)
COMMIT = re.compile(r"(?<![-\w])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![-\w])")


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_lab_notes_in_user_documentation(path):
    text = path.read_text()
    assert not COMMIT.findall(text), COMMIT.findall(text)
    assert not re.findall(r"\bseeds? 0\d\d\b", text, flags=re.I)


def test_no_docstring_points_outside_the_package():
    for path in (REPO / "django_blueque").rglob("*.py"):
        assert "../shared" not in path.read_text(), path


@pytest.mark.parametrize("path", sorted((REPO / "docs").rglob("*.rst")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_literal_nested_in_emphasis(path):
    """reST cannot nest markup: ``*run ``bq_listen``*`` shows its backticks."""
    text = re.sub(r"``[^`]+``", "\x00", path.read_text())  # each literal, one mark
    assert not re.findall(r"(?<![*\w])\*[^*\s][^*\n]*\x00[^*\n]*\*(?!\*)", text)


def test_the_comparison_table_says_its_date_and_command():
    text = (REPO / "docs" / "explanation" / "comparison.rst").read_text()
    assert re.search(r"one run of ``python bench/run\.py`` .*\d{4}-\d\d-\d\d", text, flags=re.S)


def test_troubleshooting_covers_the_first_hour_errors():
    text = (REPO / "docs" / "howto" / "troubleshooting.rst").read_text()
    for seen in ("Unknown command: 'bq_listen'", "blueque.W003", "BLUEQUE_SETTINGS",
                 "Did you mean 'CONCURRENCY'?", "RedisUnavailable", "pass its pk",
                 "Tasks stay pending", "``tasks.py``", "``jobs.py``", "INSTALLED_APPS"):
        assert seen in text, seen
