"""The Blueque admin pages. The admin site serves them (admin.py) at
``/admin/django_blueque/queue/``: no URL step is needed.

Projects that mounted them themselves keep working: ``include("django_blueque.urls")`` serves
the same pages at its own path, if it comes before ``admin.site.urls`` (whose catch-all
answers 404 for everything below ``admin/``; the system check blueque.W001 says so). The
pages then link to that path (mount.py).

A queue's page is the dashboard's URL with the queue's name in the query string (a queue name
may hold any character but a space): ``/admin/django_blueque/queue/?name=video.encode``."""

from django.urls import path

from . import views
from .views import api

app_name = "blueque"
pages = [
    path("", views.dashboard, name="dashboard"),
    path("listeners/", views.listeners, name="listeners"),
    path("find/", views.find, name="find"),
    path("tasks/<str:task_id>/", views.task, name="task"),
    path("tasks/<str:task_id>/progress/", views.task_progress, name="task_progress"),
    path("actions/", views.task_action, name="action"),
    path("listeners/requeue/", views.requeue_listener, name="requeue_listener"),
    path("bulk/", views.bulk_job, name="bulk_job"),
    path("bulk/start/", views.bulk_start, name="bulk_start"),
    path("bulk/step/", views.bulk_step, name="bulk_step"),
    path("bulk/stop/", views.bulk_stop, name="bulk_stop"),
    path("metrics/", views.metrics, name="metrics"),
    path("metrics.json", views.metrics_json, name="metrics_json"),
    path("api/queues/", api.queues, name="api_queues"),
    path("api/counts/", api.counts, name="api_counts"),
    path("api/tasks/", api.tasks, name="api_tasks"),
    path("api/tasks/<str:task_id>/", api.task, name="api_task"),
    path("api/workflows/<str:workflow_id>/", api.workflow, name="api_workflow"),
    path("api/actions/", api.task_actions, name="api_actions"),
    path("api/bulk/", api.bulk, name="api_bulk"),
]
urlpatterns = pages
