"""No tables: the tasks live in Redis. One unmanaged model carries the admin's permissions, so
they can be granted to groups and users on the admin's usual screens, and gives Blueque its
entry on the admin index."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class Queue(models.Model):
    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_tasks", _("Can view queues, tasks and listeners")),
            ("retry_tasks", _("Can retry failed tasks, run scheduled tasks now and requeue "
                              "the tasks of dead listeners")),
            ("cancel_tasks", _("Can cancel tasks and mark stuck tasks failed")),
            ("delete_tasks", _("Can delete finished tasks")),
        ]
        verbose_name = _("queue")
        verbose_name_plural = _("queues and tasks")

    def __str__(self) -> str:
        return str(self.pk)
