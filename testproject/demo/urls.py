from django.urls import path

from . import views

app_name = "demo"
urlpatterns = [
    path("", views.index, name="index"),
    path("start/", views.start, name="start"),
    path("status/<str:task_id>/", views.status, name="status"),
]
