"""The Sphinx site builds as CI builds it (issue 18): warnings are errors, every internal
reference resolves (-n, nitpicky: an offline build cannot check outside links), every doctest
passes against a private Redis, and the README's links into the docs land on a page and an
anchor that exist. Needs the ``docs`` extra (runtests.py installs it in one environment)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docs, pytest.mark.xdist_group("docs-build")]

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
DOCS_URL = "https://django-blueque.readthedocs.io/en/latest/"


def sphinx(builder, out, **env):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("DJANGO_SETTINGS_MODULE", "BLUEQUE_DOCS_REDIS_URL")}
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", builder, "-W", "--keep-going", "-n", "-q",
         "-E", str(DOCS), str(out)],
        capture_output=True, text=True, timeout=600, env={**clean, **env}, cwd=REPO)
    assert done.returncode == 0, f"sphinx-build -b {builder} failed:\n{done.stdout}\n" \
                                 f"{done.stderr}"
    return done


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    sphinx("html", out)
    return out


def test_the_site_builds_with_warnings_as_errors_and_every_internal_reference_resolves(html):
    pages = {p.relative_to(html).as_posix() for p in html.rglob("*.html")}
    for page in ("index.html", "tutorial/getting-started.html", "howto/deploying.html",
                 "reference/settings.html", "reference/protocol.html",
                 "explanation/delivery.html"):
        assert page in pages
    assert (html / "_static" / "task-states.svg").exists()
    # the commands' --help is printed from their parsers at build time
    commands = (html / "reference" / "commands.html").read_text()
    assert "--with-scheduler" in commands and "--dry-run" in commands


def test_every_doctest_passes_against_a_private_redis(tmp_path, redis_url):
    sphinx("doctest", tmp_path, BLUEQUE_DOCS_REDIS_URL=redis_url)
    summary = (tmp_path / "output.txt").read_text()
    ran = int(re.search(r"Doctest summary\n=+\n *(\d+) tests", summary).group(1))
    assert ran >= 40, summary  # a builder that found no doctest would pass too
    assert "0 failures in tests" in summary and "0 failures in setup code" in summary


def test_the_readme_links_land_on_pages_and_anchors_that_exist(html):
    links = re.findall(re.escape(DOCS_URL) + r"([\w/.-]*)(?:#([\w-]+))?",
                       (REPO / "README.md").read_text())
    assert len(links) >= 8, links
    for page, anchor in links:
        target = html / (page or "index.html")
        assert target.is_file(), f"README links to {page}, which the build does not have"
        if anchor:
            assert f'id="{anchor}"' in target.read_text(), f"no #{anchor} in {page}"
