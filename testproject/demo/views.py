"""The demo page: start a long task, a failing one or a scheduled one, and follow them."""

import datetime

from django import forms
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from django_blueque import get_result

from . import tasks

KINDS = {
    "long": "A long task reporting progress",
    "fail": "A task that fails",
    "flaky": "A task that fails twice, then succeeds on retry",
    "scheduled": "A report scheduled to run in N seconds",
}


class StartForm(forms.Form):
    kind = forms.ChoiceField(choices=KINDS.items())
    steps = forms.IntegerField(min_value=1, max_value=1000, initial=20,
                               help_text="Steps of the long task (half a second each).")
    delay = forms.IntegerField(min_value=0, max_value=86400, initial=10,
                               help_text="Seconds before the scheduled report runs.")


def index(request):
    started = request.session.get("started", [])
    return render(request, "demo/index.html", {"form": StartForm(), "started": started})


@require_POST
def start(request):
    form = StartForm(request.POST)
    if not form.is_valid():
        return render(request, "demo/index.html", {"form": form, "started": []}, status=400)
    kind = form.cleaned_data["kind"]
    if kind == "long":
        task_id = tasks.long_task.enqueue_on_commit(steps=form.cleaned_data["steps"])
    elif kind == "fail":
        task_id = tasks.failing_task.enqueue()
    elif kind == "flaky":
        task_id = tasks.flaky_task.enqueue()
    else:
        delay = datetime.timedelta(seconds=form.cleaned_data["delay"])
        task_id = tasks.report.schedule(delay, title="scheduled from the demo page")
    request.session["started"] = [(task_id, KINDS[kind])] + request.session.get("started", [])[:19]
    return redirect("demo:index")


def status(request, task_id):
    result = get_result(task_id)
    if result.status is None:
        raise Http404("no such task")
    return JsonResponse({"id": task_id, "status": result.status, "progress": result.progress,
                         "message": result.progress_message, "result": result.result,
                         "error": result.error, "attempts": result.attempts})
