from testproject.settings import *  # noqa: F403

TASKS = {"default": {"BACKEND": "django_blueque.backends.BluequeBackend",
                     "QUEUES": ["default", "other"]}}
