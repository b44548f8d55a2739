"""Blueque's entry on the admin index: the unmanaged Queue model, whose only page is a
redirect to the dashboard (the pages themselves are in views.py, mounted by urls.py)."""

from django.contrib import admin
from django.shortcuts import redirect
from django.urls import path

from .actions import PERMISSIONS
from .models import Queue


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [path("", self.admin_site.admin_view(self.changelist_view),
                     name=f"{info[0]}_{info[1]}_changelist")]

    def changelist_view(self, request, extra_context=None):
        return redirect("blueque:dashboard")

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm(PERMISSIONS["view"])

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
