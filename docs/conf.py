"""Sphinx configuration of django_blueque's documentation.

Autodoc imports the package, so Django is set up with docs_settings (no Redis is needed to
build; the doctests read BLUEQUE_DOCS_REDIS_URL when they need one)."""

import doctest
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]
os.environ["DJANGO_SETTINGS_MODULE"] = "docs_settings"

import django  # noqa: E402

django.setup()

import django_blueque  # noqa: E402

project = "django_blueque"
author = "django_blueque contributors"
copyright = "django_blueque contributors"  # noqa: A001
release = version = django_blueque.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.doctest", "blueque_docs"]
exclude_patterns = ["_build"]
html_static_path = ["_static"]
html_theme = "alabaster"
html_title = f"django_blueque {release}"

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # signatures say it; the package's annotations are not complete yet

# -n (nitpicky) checks every internal reference; these are the other projects' names, whose
# inventories an offline build cannot fetch.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(redis|django|datetime|collections|typing|threading)(\..*)?"),
    (r"py:class", r"(BaseException|Exception|TimeoutError|LookupError|dict|str|int|float)"),
]

# Exception messages are part of what the doctests check (Sphinx ignores them by default).
doctest_default_flags = doctest.ELLIPSIS | doctest.DONT_ACCEPT_TRUE_FOR_1
