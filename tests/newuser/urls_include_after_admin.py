"""What the README used to say, followed literally: the include after the admin's catch-all."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls)]
urlpatterns += [path("admin/blueque/", include("django_blueque.urls"))]
