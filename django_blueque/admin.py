"""Blueque in the admin site, as a contrib app is: its pages are URLs of the Queue model's
admin (``/admin/django_blueque/queue/``), so ``INSTALLED_APPS`` and ``BLUEQUE`` are the whole
setup. The admin index's "Queues and tasks" leads to the dashboard (mount.py: on the
project's own include of django_blueque.urls if it has one)."""

from django.contrib import admin
from django.shortcuts import redirect
from django.urls import include, path

from . import views
from .actions import PERMISSIONS
from .models import Queue
from .mount import page_url
from .urls import pages


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("", self.changelist_view, name="{}_{}_changelist".format(*info)),
            path("", include((pages, "blueque"))),
        ]

    def changelist_view(self, request, extra_context=None):
        dashboard = page_url("blueque:dashboard")
        if dashboard != request.path:
            return redirect(dashboard)
        return views.dashboard(request)

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm(PERMISSIONS["view"])

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
