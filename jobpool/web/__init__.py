"""The web dashboard: ``jobpool web`` (DESIGN section 13, R47).

Needs the ``web`` extra (Starlette, uvicorn, Jinja2). ``create_app`` is the Starlette
application; ``server.serve`` runs it under uvicorn in a process of its own.
"""
from __future__ import annotations

from typing import Any


def create_app(store_url: str | None, **options: Any) -> Any:
    from jobpool.web.app import create_app as create
    return create(store_url, **options)


__all__ = ["create_app"]
