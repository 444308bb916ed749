"""``manage.py jobpool start --procs 4`` (and every other ``jobpool`` command) with the
project's settings: the store from ``settings.JOBPOOL['DB']``, the jobs from the installed
apps' ``jobs`` modules (or ``JOBPOOL['MODULES']``), Django set up before the pool forks."""
from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from jobpool import cli
from jobpool.contrib.django import import_job_modules, settings_of


class Command(BaseCommand):
    help = ("Run a jobpool command (start, status, jobs, dead, top, ...) on the project's store, "
            "with its jobs registered: manage.py jobpool start --procs 4")
    # The pool checks what it needs itself; a system check may open a database connection
    # that would then be held across the fork of every child.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("arguments", nargs=argparse.REMAINDER,
                            help="the jobpool command and its options, as `jobpool --help` lists them")

    def handle(self, *args: Any, arguments: list[str], **options: Any) -> None:
        if not arguments:
            raise CommandError("name a jobpool command: manage.py jobpool start (or status, "
                               "jobs, dead, top, ...; manage.py jobpool --help lists them)")
        try:
            conf = settings_of()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        import_job_modules()
        if conf.db is not None:
            # Every subcommand reads $JOBPOOL_DB when --db is not given (R28).
            os.environ["JOBPOOL_DB"] = conf.db
        # No Django connection opened so far (by an import, say) may cross the fork of a
        # child (R43): each child opens its own when a job first uses the ORM.
        connections.close_all()
        code = cli.main(arguments)
        if code:
            raise SystemExit(code)
