"""The Django app: ``INSTALLED_APPS = [..., "jobpool.contrib.django"]`` gives the project
``manage.py jobpool`` and makes a pool's children look after Django's connections."""
from __future__ import annotations

from django.apps import AppConfig


class JobpoolConfig(AppConfig):
    name = "jobpool.contrib.django"
    label = "jobpool"
    verbose_name = "jobpool"

    def ready(self) -> None:
        import jobpool
        from jobpool.contrib.django import start_child
        jobpool.on_child_start(start_child)
