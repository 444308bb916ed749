"""jobpool.contrib.asgi (R53) with the real frameworks' TestClient: the store opens with
the app, serves its requests, closes with it; a real pool runs what the app enqueued."""
from __future__ import annotations

import asyncio
import os
import warnings
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi import Depends, FastAPI, Request  # noqa: E402
with warnings.catch_warnings():
    # Starlette's TestClient warns that it will move to another HTTP client (tests/test_web.py).
    warnings.filterwarnings("ignore", "Using `httpx`", UserWarning)
    from fastapi.testclient import TestClient  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

import jobpool  # noqa: E402
from jobpool.contrib.asgi import lifespan, store_of  # noqa: E402

JOBS = """
import jobpool

@jobpool.job(name="math.square", store_result=True)
def square(x):
    return x * x
"""


def test_a_fastapi_app_opens_its_store_at_startup_and_closes_it_at_shutdown(make_app):
    pool = make_app(JOBS)
    db = str(pool.db)

    @asynccontextmanager
    async def own(app):  # the app's own lifespan, entered inside jobpool's
        yield {"greeting": "hi"}

    app = FastAPI(lifespan=lifespan(db, then=own))

    @app.post("/square/{x}")
    async def enqueue(x: int, store=Depends(store_of)):
        return {"id": (await store.aenqueue("math.square", x)).id}

    @app.get("/jobs/{job_id}")
    async def show(job_id: int, request: Request, store=Depends(store_of)):
        row = await asyncio.to_thread(store.get, job_id)
        return {"status": row["status"], "result": row["result"], "greeting": request.state.greeting}

    with TestClient(app) as client:
        job_id = client.post("/square/12").json()["id"]
        # Open: the store's WAL is beside its file while a connection holds it
        assert Path(db + "-wal").exists()
    # Closed with the app: the last connection folded the WAL into the file and removed it
    assert not Path(db + "-wal").exists()
    pool.start()  # jobpool start --burst
    with TestClient(app) as client:
        assert client.get(f"/jobs/{job_id}").json() == {"status": "done", "result": "144",
                                                       "greeting": "hi"}


def test_a_starlette_app_with_an_unusable_store_does_not_start(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_text("these are notes, not a database\n" * 100)

    async def home(request):
        return JSONResponse({"store": store_of(request).path})

    app = Starlette(routes=[Route("/", home)], lifespan=lifespan(bad))
    with pytest.raises(jobpool.JobpoolError):
        with TestClient(app):
            pass
    assert "these are notes" in bad.read_text()  # refused, never overwritten (R26a)
    # Without the lifespan a request hears what is missing, in one line
    bare = Starlette(routes=[Route("/", home)])
    with TestClient(bare) as client, pytest.raises(RuntimeError, match=r"lifespan=jobpool\.contrib"):
        client.get("/")


def _sockets() -> int:
    """This process's open sockets (a PostgreSQL store's connections among them)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # the descriptor listdir itself used, closed since
            pass
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts sockets in /proc")
def test_a_postgresql_store_is_disconnected_when_the_app_stops(pg_url):
    app = FastAPI(lifespan=lifespan(pg_url))

    @app.post("/square/{x}")
    async def enqueue(x: int, store=Depends(store_of)):
        return {"id": (await store.aenqueue("math.square", x)).id}

    before = _sockets()
    with TestClient(app) as client:
        assert client.post("/square/3").json()["id"] >= 1
        assert _sockets() > before          # the store's connections to the server
    assert _sockets() == before             # every one closed with the app
    check = jobpool.connect(pg_url)
    try:
        assert [row["name"] for row in check.list_jobs()] == ["math.square"]
    finally:
        check.close()
