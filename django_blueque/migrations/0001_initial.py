from django.db import migrations, models


class Migration(migrations.Migration):
    """The Queue model has no table (managed=False): this migration only makes Django create
    its permissions and content type."""

    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False,
                                        verbose_name="ID")),
            ],
            options={
                "verbose_name": "queue",
                "verbose_name_plural": "queues and tasks",
                "permissions": [
                    ("view_tasks", "Can view queues, tasks and listeners"),
                    ("retry_tasks", "Can retry failed tasks, run scheduled tasks now and "
                                    "requeue the tasks of dead listeners"),
                    ("cancel_tasks", "Can cancel tasks and mark stuck tasks failed"),
                    ("delete_tasks", "Can delete finished tasks"),
                ],
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
