"""startproject's urls.py, untouched: the admin site alone serves the Blueque pages."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
