"""The README's "Install into an existing project", followed word for word by a new user
(issue 13, acceptance): its code blocks, read from README.md, applied in order to a brand-new
``django-admin startproject``; the task it enqueues runs in the ``bq_listen`` it starts, and the
Blueque pages answer 200 through the admin index's link. So the README cannot drift again.

Only two things are the test's own: ``pip install`` is replaced by the repository on
PYTHONPATH, and BLUEQUE's URL is pointed at the private Redis after the settings block."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.servers import wait_for

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Install into an existing project"


def readme_blocks():
    """[(language, code)] of the section's fenced code blocks, in order."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(SECTION) + len(SECTION):]
    section = section[:section.index("\n## ")]
    return re.findall(r"^```(\w+)\n(.*?)^```$", section, flags=re.S | re.M)


def commands(code):
    """The command lines of a sh block, without their comments."""
    return [re.sub(r"\s+#.*$", "", line).strip() for line in code.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


class Project:
    def __init__(self, root, redis_url):
        self.root = root
        self.redis_url = redis_url
        drop = ("DJANGO_SETTINGS_MODULE", "BLUEQUE_URL", "PYTHONPATH")
        self.env = {**{k: v for k, v in os.environ.items() if k not in drop},
                    "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        self.background = []
        self.run(sys.executable, "-m", "django", "startproject", "mysite", ".")

    def run(self, *cmd, stdin=None):
        done = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True, text=True,
                              input=stdin, timeout=180)
        assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout}\n" \
                                     f"{done.stderr}"
        return done.stdout

    def shell(self, code):
        return self.run(sys.executable, "manage.py", "shell", "-c", code)

    def write_file_block(self, code):
        """A code block whose first line names a file (``# settings.py``, ``# yourapp/tasks.py``):
        added to the project's settings (then pointed at the test's Redis) or written as that
        file. False for a block that names no file."""
        target = re.fullmatch(r"# (\S+\.py)\b.*", code.splitlines()[0])
        if not target:
            return False
        if target.group(1) == "settings.py":
            settings = self.root / "mysite" / "settings.py"
            settings.write_text(settings.read_text() + "\n" + code +
                                f"\nBLUEQUE['URL'] = {self.redis_url!r}  # the test's\n")
        else:
            (self.root / target.group(1)).write_text(code)
        return True

    def command(self, line):
        words = line.split()
        if words[:2] == ["pip", "install"]:
            assert "django-blueque" in words  # the test's PYTHONPATH stands for it
            return
        assert words[:2] == ["python", "manage.py"], line
        if words[2] == "bq_listen":  # runs until stopped
            self.background.append(subprocess.Popen(
                [sys.executable, *words[1:]], cwd=self.root, env=self.env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True))
        else:
            self.run(sys.executable, *words[1:])

    def stop(self):
        for process in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


PAGES = """
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
User.objects.create_superuser("root", "root@example.com", "pw")
client = Client()
client.login(username="root", password="pw")
index = client.get("/admin/")
link = re.search(r'<a href="([^"]+)"[^>]*>Queues and tasks</a>', index.content.decode())
print("index", index.status_code, link and link.group(1))
dashboard = client.get(link.group(1), follow=True)
print("dashboard", dashboard.status_code, "video.encode" in dashboard.content.decode())
page = client.get(dashboard.request["PATH_INFO"] + "tasks/" + TASK_ID + "/")
print("task", page.status_code, "complete" in page.content.decode())
"""


@pytest.fixture
def project(tmp_path, redis_url):
    made = Project(tmp_path, redis_url)
    yield made
    made.stop()


def test_the_readme_install_section_works_verbatim_in_a_new_project(project, r):
    blocks = readme_blocks()
    assert [language for language, _ in blocks].count("python") >= 3
    task_id = None
    for language, code in blocks:
        if language == "sh":
            for line in commands(code):
                project.command(line)
        elif not project.write_file_block(code):
            task_id = project.shell(code + "\nprint(task_id)").split()[-1]
    assert task_id, "the section enqueues no task"
    key = f"blueque_task_{task_id}"
    # something to watch: the task reports progress while it runs (issue 42, item 16)
    wait_for(lambda: r.hget(key, "status") == "started" and
             0 < float(r.hget(key, "progress") or 0) < 100, timeout=60,
             message=lambda: f"no progress seen while it ran: {r.hgetall(key)}")
    wait_for(lambda: r.hget(key, "status") == "complete", timeout=60,
             message=lambda: f"task {r.hgetall(key)}; listener: {listener_output(project)}")
    assert r.hget(key, "result") == '{"video_id":42,"ok":true}'
    assert project.run(sys.executable, "manage.py", "check").strip() == \
        "System check identified no issues (0 silenced)."
    output = project.shell(f"import re\nTASK_ID = {task_id!r}\n{PAGES}")
    shown = [line for line in output.splitlines() if line.startswith(("index", "dashboard",
                                                                     "task"))]
    assert shown == ["index 200 /admin/django_blueque/queue/", "dashboard 200 True",
                         "task 200 True"], shown


def listener_output(project):
    project.stop()
    return "".join(process.stdout.read() for process in project.background)


def test_the_section_has_no_url_step():
    code = "\n".join(code for _, code in readme_blocks())
    assert "urlpatterns" not in code and "include(" not in code

