"""The URLconf of the JSON API's doctests: the Blueque pages at /blueque/."""

from django.urls import include, path

urlpatterns = [path("blueque/", include("django_blueque.urls"))]
