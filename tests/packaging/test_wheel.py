"""The wheel built from the repository: it holds everything the package needs (py.typed, the
Lua scripts, the templates, the static files, the French and German translations compiled,
every module), and, installed into a fresh virtualenv without the repository on the path, it
works in a new Django project made with ``django-admin startproject``: ``check``, ``migrate``,
``collectstatic``, a task run by ``bq_listen --burst``, and the admin views rendered with
their templates for a superuser (in French too).

Slow (it builds, makes a virtualenv and installs from the package index): skipped by
``runtests.py --fast``."""

import json
import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "django_blueque"

pytestmark = [pytest.mark.slow, pytest.mark.django_agnostic, pytest.mark.xdist_group("wheel")]


def package_files(*patterns):
    """Files of the source tree matching ``patterns`` (relative to the repository), without
    compiled Python."""
    found = set()
    for pattern in patterns:
        for path in REPO.glob(pattern):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.add(path.relative_to(REPO).as_posix())
    return found


def clean_env(**extra):
    """The environment of a process that must see only the installed wheel: nothing of the
    repository, of the test settings or of a Redis the tests did not start."""
    drop = ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "BLUEQUE_URL", "VIRTUAL_ENV", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def run(cmd, cwd, timeout=600, env=None):
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env or clean_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (f"{' '.join(str(c) for c in cmd)} exited "
                                  f"{done.returncode}:\n{done.stdout[-5000:]}\n"
                                  f"{done.stderr[-5000:]}")
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """An sdist and a wheel built from the repository with ``python -m build`` (the wheel is
    built from the sdist, so MANIFEST.in is tested too)."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", out, REPO], cwd=out)
    wheels = list(out.glob("django_blueque-*.whl"))
    sdists = list(out.glob("django_blueque-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


@pytest.fixture(scope="module")
def wheel_names(dist):
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        return set(wheel.namelist())


def test_wheel_holds_typing_marker_lua_templates_and_static(wheel_names):
    assert "django_blueque/py.typed" in wheel_names
    lua = package_files("django_blueque/core/lua/*.lua")
    assert lua, "no Lua script in the source tree?"
    data = package_files("django_blueque/templates/**/*", "django_blueque/static/**/*",
                         "django_blueque/locale/**/*")
    missing = sorted((lua | data) - wheel_names)
    assert not missing, f"missing from the wheel: {missing}"


def test_wheel_holds_the_translations_compiled(wheel_names):
    for lang in ("fr", "de"):
        for suffix in ("po", "mo"):
            name = f"django_blueque/locale/{lang}/LC_MESSAGES/django.{suffix}"
            assert name in wheel_names, f"{name} is not in the wheel"


def test_wheel_holds_every_module_and_nothing_else(wheel_names):
    modules = package_files("django_blueque/**/*.py")
    assert "django_blueque/management/commands/bq_listen.py" in modules
    missing = sorted(modules - wheel_names)
    assert not missing, f"modules missing from the wheel: {missing}"
    strays = sorted(name for name in wheel_names
                    if not name.startswith(("django_blueque/", "django_blueque-"))
                    or name.endswith(".pyc") or "__pycache__" in name)
    assert not strays, f"files that do not belong in the wheel: {strays}"


def test_wheel_metadata(dist):
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(wheel.read(info).decode())
        licenses = [n for n in wheel.namelist() if ".dist-info/licenses/" in n]
    assert metadata["Name"] == "django-blueque"
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("Project-URL") == [
        "Documentation, https://django-blueque.readthedocs.io/"]  # where the README's links go
    assert any(n.endswith("/LICENSE") for n in licenses), licenses
    requires = metadata.get_all("Requires-Dist")
    for requirement in ("Django>=5.2", "redis>=5.3", "django-redis", "croniter"):
        assert any(r.startswith(requirement) and "extra ==" not in r for r in requires), (
            requirement, requires)
    # the otel extra brings OpenTelemetry's API only (issue 41); nothing of it otherwise
    assert [r.split(";")[0].strip() for r in requires if 'extra == "otel"' in r] == [
        "opentelemetry-api>=1.20"], requires
    assert not [r for r in requires if "opentelemetry" in r and "extra ==" not in r]
    classifiers = metadata.get_all("Classifier")
    for classifier in ("Programming Language :: Python :: 3.11",
                       "Programming Language :: Python :: 3.12",
                       "Programming Language :: Python :: 3.13",
                       "Framework :: Django :: 5.2", "Framework :: Django :: 6.0",
                       "Typing :: Typed"):
        assert classifier in classifiers


def test_sdist_holds_license_docs_tests_and_demo(dist):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    wanted = {"LICENSE", "CHANGELOG.md", "README.md", "rundemo.py", "runtests.py",
              "devtools/demo.py", "devtools/demo_install.py", "devtools/demo_services.py",
              "devtools/process_tree.py", "devtools/testing.py", "devtools/testing_envs.py",
              "MANIFEST.in", "setup.cfg", "pyproject.toml", "tests/conftest.py",
              "testproject/manage.py"}
    wanted = {name for name in wanted if (REPO / name).exists()}
    assert wanted - names == set()
    assert not [name for name in names if name.startswith(("testproject/.demo", ".venv"))
                or "/.venvs/" in name or name.endswith((".pyc", ".sqlite3"))]


SETTINGS_TAIL = """
INSTALLED_APPS += ["django_blueque", "jobs"]
BLUEQUE = {{"URL": {redis_url!r}}}
STATIC_ROOT = BASE_DIR / "static-root"
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/blueque/", include("django_blueque.urls")),
    path("admin/", admin.site.urls),
]
"""

TASKS = """
from django_blueque import blueque_task


@blueque_task(queue="wheel.add")
def add(a, b):
    return a + b
"""

# Run inside the new project with the venv's python: enqueue, then (after bq_listen --burst)
# read the result and render the admin views through Django's test client.
CHECK = """
import json
import os
import sys

import django

django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment
from django.urls import reverse
from django.utils import translation

import django_blueque
from django_blueque import get_result
from jobs.tasks import add

step = sys.argv[1]
if step == "enqueue":
    print(json.dumps({"task_id": add.enqueue(a=2, b=3)}))
    sys.exit(0)

task_id = sys.argv[2]
setup_test_environment()
result = get_result(task_id)
user = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw-for-tests")
anonymous = Client().get("/admin/blueque/")
client = Client()
client.force_login(user)
pages = {}
for name, url in (("dashboard", "/admin/blueque/"),
                  ("task", reverse("blueque:task", args=[task_id]))):
    response = client.get(url)
    pages[name] = {
        "url": url,
        "status": response.status_code,
        "templates": [t.name for t in response.templates if t.name],
        "origins": [str(t.origin.name) for t in response.templates
                    if getattr(t, "origin", None) and t.origin.name],
        "html": response.content.decode(),
    }
with translation.override("fr"):  # startproject has no LocaleMiddleware: the active language
    french = client.get("/admin/blueque/").content.decode()
print(json.dumps({
    "package": django_blueque.__file__,
    "french": "Tableau de bord" in french and ">Rechercher<" in french,
    "status": result.status,
    "result": result.result,
    "anonymous": [anonymous.status_code, anonymous.get("Location", "")],
    "pages": pages,
}))
"""


@pytest.fixture(scope="module")
def site(dist, tmp_path_factory, redis_server):
    """A fresh virtualenv holding only the wheel and its dependencies, and a new Django
    project made with ``django-admin startproject`` that uses django_blueque."""
    root = tmp_path_factory.mktemp("wheel-site")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False, clear=True)
    python = env_dir / "bin" / "python"
    run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q",
         dist["wheel"]], cwd=root)
    project = root / "newsite"
    project.mkdir()
    run([env_dir / "bin" / "django-admin", "startproject", "newsite", project], cwd=root)
    run([python, "manage.py", "startapp", "jobs"], cwd=project)
    (project / "jobs" / "tasks.py").write_text(TASKS)
    settings = project / "newsite" / "settings.py"
    settings.write_text(settings.read_text() + SETTINGS_TAIL.format(redis_url=redis_server.url))
    (project / "newsite" / "urls.py").write_text(URLS)
    (project / "check_wheel.py").write_text(CHECK)
    return {"python": python, "project": project, "env_dir": env_dir}


def test_wheel_works_in_a_new_project(site, redis_url):
    python, project = site["python"], site["project"]
    env = clean_env(DJANGO_SETTINGS_MODULE="newsite.settings")

    def manage(*args, timeout=300):
        return run([python, "manage.py", *args], cwd=project, env=env, timeout=timeout)

    manage("check", "--fail-level", "WARNING")
    manage("migrate", "--noinput")
    manage("collectstatic", "--noinput")
    static = package_files("django_blueque/static/**/*")
    collected = {f"django_blueque/static/{p.relative_to(project / 'static-root').as_posix()}"
                 for p in (project / "static-root").rglob("*") if p.is_file()}
    assert static - collected == set(), "static files not found by collectstatic"

    enqueued = run([python, "check_wheel.py", "enqueue"], cwd=project, env=env)
    task_id = json.loads(enqueued.stdout.strip().splitlines()[-1])["task_id"]
    manage("bq_listen", "--burst", "--noreload", "wheel.add", timeout=120)
    checked = run([python, "check_wheel.py", "pages", task_id], cwd=project, env=env)
    report = json.loads(checked.stdout.strip().splitlines()[-1])

    site_packages = str(site["env_dir"])
    assert report["package"].startswith(site_packages), report["package"]
    assert report["status"] == "complete"
    assert report["result"] == 5
    assert report["anonymous"][0] == 302 and "login" in report["anonymous"][1]

    for name, page in report["pages"].items():
        assert page["status"] == 200, (name, page["status"], page["html"][:2000])
        ours = [t for t in page["templates"] if t.startswith("django_blueque/")]
        assert ours, f"{name}: no django_blueque template used: {page['templates']}"
        assert any(origin.startswith(site_packages) and "/django_blueque/templates/" in origin
                   for origin in page["origins"]), (
            f"{name}: templates not loaded from the installed wheel: {page['origins']}")
        assert "admin/base_site.html" in page["templates"] or "admin/base.html" in \
            page["templates"], f"{name}: does not extend the admin's base"
    assert "wheel.add" in report["pages"]["dashboard"]["html"]
    assert report["french"], "the dashboard is not in French: the .mo of the wheel unused?"
    assert task_id in report["pages"]["task"]["html"]

