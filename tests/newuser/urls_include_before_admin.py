"""A project that mounted the pages itself, before the admin's catch-all (reachable)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/blueque/", include("django_blueque.urls")),
    path("admin/", admin.site.urls),
]
