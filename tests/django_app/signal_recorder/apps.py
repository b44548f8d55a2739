from django.apps import AppConfig


class SignalRecorderConfig(AppConfig):
    """Records every django_blueque signal it receives in a Redis list, from whichever process
    sends it (the task signals come from the forked task processes)."""

    name = "tests.django_app.signal_recorder"

    def ready(self):
        from django_blueque import signals
        from django_blueque.conf import get_client

        def recorder(name):
            def receive(sender, task_id, **kwargs):
                get_client().redis.rpush("test_signals", f"{name} {task_id} {sender.queue}")
            return receive

        self.receivers = []
        for name in ("task_enqueued", "task_started", "task_succeeded", "task_failed",
                     "task_retried"):
            receiver = recorder(name)
            self.receivers.append(receiver)
            getattr(signals, name).connect(receiver)
