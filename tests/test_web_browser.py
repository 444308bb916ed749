"""The web dashboard in a real browser (R47, issue 27): a `jobpool web` process over a
store with jobs in it, driven by Playwright in Debian's headless Chromium (launched by
its path; no browser is ever downloaded). Every test also checks that the page logged
no console error and asked nothing of any origin but the dashboard's own (htmx is
vendored, so nothing comes from a CDN).

Without Chromium or Playwright these tests skip, saying which is missing; under CI (or
with ``JOBPOOL_REQUIRE_BROWSER=1``) they fail instead, so a broken install cannot pass
as a green run. Each wait is for a selector, a URL or a store state, never a sleep.
Over SQLite; the tests marked ``on_both_stores`` over PostgreSQL too (why:
tests/test_web.py).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from tests.conftest import ROOT  # noqa: E402
from tests.test_web import (HOSTILE, HOSTILE_NAME, _dead_jobs,  # noqa: E402, F401
                            on_both_stores, store_url)

#: Where Debian's package puts Chromium (scripts/test installs it when root).
CHROMIUM = Path(os.environ.get("JOBPOOL_CHROMIUM", "/usr/bin/chromium"))
#: How long any one wait may take: generous, for a loaded 2-core machine.
WAIT_MS = 30_000
#: Where the main pages' screenshots go when set (the README's are made so:
#: ``JOBPOOL_SCREENSHOTS=docs/screenshots``); else a test's own temporary folder.
SCREENSHOTS = os.environ.get("JOBPOOL_SCREENSHOTS")
#: Every address but the dashboard's own: what a page asks of one is refused and noted.
FOREIGN = re.compile(r"^(?!https?://(127\.0\.0\.1|localhost)[:/])")


def _browser_required() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false") \
        or os.environ.get("JOBPOOL_REQUIRE_BROWSER") == "1"


def _missing(reason: str) -> None:
    if _browser_required():
        pytest.fail(f"{reason} (required: CI or JOBPOOL_REQUIRE_BROWSER=1 is set)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        _missing("the browser tests need Playwright: pip install -e '.[test]'")
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"the browser tests need Chromium at {CHROMIUM}: apt-get install chromium "
                 "(scripts/test does so when run as root)")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        except Error as exc:
            _missing(f"Chromium at {CHROMIUM} did not start: {str(exc).splitlines()[0]}")
        yield launched
        launched.close()


class Watched:
    """A browser page with what it logged and asked for: console errors, uncaught page
    errors, and every request to a host that is not the dashboard's."""

    def __init__(self, context) -> None:
        self.page = context.new_page()
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        # Refused, not fetched: a test run sends nothing beyond this host.
        context.route(FOREIGN, self._refuse)

    def expect_error(self, text: str) -> None:
        """A console error this test causes on purpose (a refused login's 401): it is
        there once, then forgotten."""
        assert any(text in e for e in self.errors), (text, self.errors)
        self.errors = [e for e in self.errors if text not in e]

    def _refuse(self, route) -> None:
        self.foreign.append(route.request.url)
        route.abort()


@pytest.fixture
def watched(browser) -> Iterator[Watched]:
    from playwright.sync_api import expect
    expect.set_options(timeout=WAIT_MS)
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    seen = Watched(context)
    yield seen
    context.close()
    assert seen.errors == [], seen.errors
    assert seen.foreign == [], seen.foreign


@pytest.fixture
def page(watched):
    return watched.page


@pytest.fixture
def serve(store_url) -> Iterator:
    """``serve(*options)``: a ``jobpool web`` process over the test's store on a free
    port, stopped after the test; returns its base URL. ``by_file_name``: a SQLite
    store named by its file name from its own folder, as the overview's heading then
    shows it (the screenshots show no test's temporary path)."""
    started: list[subprocess.Popen] = []

    def start(*options: str, by_file_name: bool = False) -> str:
        db, cwd = store_url, None
        if by_file_name:
            db, cwd = Path(store_url).name, Path(store_url).parent
        proc = subprocess.Popen([sys.executable, "-m", "jobpool", "web", "--db", db,
                                 "--bind", "127.0.0.1:0", *options],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        started.append(proc)
        line = proc.stdout.readline()  # the announce line, once it listens
        found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
        return found.group(1)

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)
        errors = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
        assert "Traceback" not in errors, errors


def _listed(page) -> list[int]:
    return [int(i) for i in page.locator("#jobs tr.job").evaluate_all(
        "rows => rows.map(r => r.dataset.id)")]


def _all_matching(page, listing: str, action: str, button: str, notice: str) -> None:
    """From the list at ``listing``, an action on all 3 matching jobs: its link, the
    confirmation's count, its button, and the notice back on the list."""
    from playwright.sync_api import expect
    page.goto(listing)
    page.locator(f"#bulk-{action}").click()
    page.wait_for_url(re.compile(rf"/jobs/all/{action}\?"))
    expect(page.locator("#bulk-count")).to_contain_text("3 jobs match")
    page.get_by_role("button", name=button).click()
    expect(page.locator(".notice")).to_have_text(notice)


@on_both_stores
def test_the_overview_shows_the_stores_counts_and_queues(any_store, serve, page):
    from playwright.sync_api import expect
    any_store.enqueue_with("b.a", queue="q1")
    any_store.enqueue_with("b.a", queue="q2")
    any_store.enqueue_with("b.b", queue="q1", delay=3600)
    _dead_jobs(any_store, 2)
    expected = any_store.stats()
    page.goto(serve() + "/")
    for key in ("ready", "scheduled", "running", "done", "dead"):
        expect(page.locator(f"#total-{key}")).to_have_text(str(expected[key]))
    expect(page.locator("#queues")).to_contain_text("q1")
    expect(page.locator("#queues")).to_contain_text("q2")


def test_the_jobs_list_filters_by_status(any_store, serve, page):
    from playwright.sync_api import expect
    dead = _dead_jobs(any_store, 3)
    live = [any_store.enqueue_with("b.live").id for _ in range(2)]
    page.goto(serve() + "/jobs")
    expect(page.locator("#jobs tr.job")).to_have_count(5)
    page.select_option("select[name=status]", "dead")
    page.get_by_role("button", name="list").click()
    page.wait_for_url(re.compile(r"/jobs\?status=dead"))
    expect(page.locator("#jobs tr.job")).to_have_count(3)
    assert _listed(page) == sorted(dead, reverse=True)
    # From the overview, a count's link is the same filter.
    page.goto(page.url.split("/jobs")[0] + "/")
    page.locator("#total-ready a").click()
    page.wait_for_url(re.compile(r"/jobs\?status=ready"))
    expect(page.locator("#jobs tr.job")).to_have_count(2)
    assert _listed(page) == sorted(live, reverse=True)


def test_a_search_by_error_text_from_the_jobs_page(any_store, serve, page):
    from playwright.sync_api import expect

    from tests.test_web_filters import _failed
    hits = _failed(any_store, ["TimeoutError: upstream", "KeyError: 'sku'", "TimeoutError: db"])
    page.goto(serve() + "/jobs")
    page.locator("details.search summary").click()
    page.fill("input[name=error]", "TimeoutError")
    page.get_by_role("button", name="list").click()
    page.wait_for_url(re.compile(r"error=TimeoutError"))
    expect(page.locator("#searched")).to_have_text(f"Searched jobs 1 to {hits[-1]}.")
    assert _listed(page) == [hits[2], hits[0]]
    expect(page.locator("input[name=error]")).to_have_value("TimeoutError")


def test_the_next_page_link_pages_through_the_jobs(any_store, serve, page):
    from playwright.sync_api import expect
    ids = [any_store.enqueue_with("b.many").id for _ in range(5)]
    page.goto(serve() + "/jobs?limit=2")
    assert _listed(page) == [ids[4], ids[3]]
    for cursor, shown in ((ids[3], [ids[2], ids[1]]), (ids[1], [ids[0]])):
        page.locator("#next-page").click()
        page.wait_for_url(re.compile(rf"after={cursor}&"))
        expect(page.locator("#jobs tr.job")).to_have_count(len(shown))
        assert _listed(page) == shown
    expect(page.locator("#next-page")).to_have_count(0)
    page.locator("#first-page").click()
    page.wait_for_url(re.compile(r"/jobs\?limit=2$"))
    assert _listed(page) == [ids[4], ids[3]]


def test_the_jobs_list_and_a_jobs_page_show_its_metadata_as_text(any_store, serve, page):
    """R67: the metadata is in its own cell of the list and on the job page without
    a reveal, a tag in it shown as text (the page runs no script from it)."""
    from playwright.sync_api import expect
    job_id = any_store.enqueue_with("b.meta", meta={"tenant": "acme",
                                                     "note": "<img src=x onerror=alert(1)>"}).id
    page.goto(serve() + "/jobs")
    expect(page.locator(f'#jobs tr.job[data-id="{job_id}"] td.meta')).to_have_text(
        'tenant=acme note="<img src=x onerror=alert(1)>"')
    expect(page.locator("#jobs img")).to_have_count(0)
    page.locator(f'#jobs tr.job[data-id="{job_id}"] a').click()
    page.wait_for_url(re.compile(rf"/jobs/{job_id}$"))
    expect(page.locator("tr", has=page.locator("th", has_text="meta")).locator("td")).to_have_text(
        '{"tenant": "acme", "note": "<img src=x onerror=alert(1)>"}')
    expect(page.locator("img")).to_have_count(0)


def test_a_job_opens_from_the_list_and_reveals_its_arguments(any_store, serve, page):
    from playwright.sync_api import expect
    job_id = any_store.enqueue_with("b.show", args=["the-argument"]).id
    page.goto(serve() + "/jobs")
    page.locator(f'#jobs tr.job[data-id="{job_id}"] a').click()
    page.wait_for_url(re.compile(rf"/jobs/{job_id}$"))
    expect(page.locator("h1")).to_have_text(f"Job {job_id}: b.show")
    expect(page.locator("#data")).not_to_contain_text("the-argument")
    page.get_by_role("link", name="reveal").click()  # htmx swaps the data in, no reload
    expect(page.locator("#data dl.data")).to_contain_text("the-argument")
    assert page.url.endswith(f"/jobs/{job_id}")


@on_both_stores
def test_retry_on_a_dead_job_makes_it_ready_in_the_store(any_store, serve, page):
    from playwright.sync_api import expect
    job_id, = _dead_jobs(any_store, 1)
    page.goto(serve() + f"/jobs/{job_id}")
    page.get_by_role("button", name="retry").click()
    expect(page.locator(".notice")).to_have_text(f"job {job_id}: retried")
    expect(page.locator("#row")).to_contain_text("ready")
    expect(page.get_by_role("button", name="retry")).to_have_count(0)
    assert any_store.get(job_id)["status"] == "ready"


def test_retry_from_the_dead_letters_page(any_store, serve, page):
    from playwright.sync_api import expect
    first, second = _dead_jobs(any_store, 2)
    page.goto(serve() + "/dead")
    page.locator(f'#dead tr.job[data-id="{first}"]').get_by_role("button", name="retry").click()
    expect(page.locator(".notice")).to_have_text(f"job {first}: retried")
    expect(page.locator("#dead tr.job")).to_have_count(1)
    assert [any_store.get(i)["status"] for i in (first, second)] == ["ready", "dead"]


def test_retry_all_matching_goes_through_a_confirmation_showing_the_count(any_store, serve,
                                                                          page):
    from playwright.sync_api import expect
    gone = _dead_jobs(any_store, 3)
    kept = _dead_jobs(any_store, 1, name="t.kept")
    _all_matching(page, serve() + "/jobs?status=dead&name=t.gone", "retry", "retry 3 jobs",
                  "retry all matching: 3 retried")
    expect(page.locator("#jobs")).to_have_count(0)  # none of that name is dead now
    assert [any_store.get(i)["status"] for i in (*gone, *kept)] == ["ready"] * 3 + ["dead"]


def test_retry_selected_retries_the_ticked_jobs(any_store, serve, page):
    from playwright.sync_api import expect
    dead = _dead_jobs(any_store, 3)
    page.goto(serve() + "/jobs?status=dead")
    for job_id in (dead[0], dead[2]):
        page.get_by_role("checkbox", name=f"select job {job_id}").check()
    page.get_by_role("button", name="retry selected").click()
    expect(page.locator(".notice")).to_have_text("retry selected: 2 retried")
    # Back on the same list: the one left unticked is the only dead one.
    assert page.url.endswith("/jobs?status=dead") and _listed(page) == [dead[1]]
    assert [any_store.get(i)["status"] for i in dead] == ["ready", "dead", "ready"]


def test_select_all_on_the_page_then_delete_selected(any_store, serve, page):
    from playwright.sync_api import expect
    dead = _dead_jobs(any_store, 3)
    ready = any_store.enqueue_with("b.a").id
    page.goto(serve() + "/jobs?status=dead&limit=2")  # a page of two: only those are ticked
    page.get_by_role("checkbox", name="select all on this page").check()
    page.get_by_role("button", name="delete selected").click()
    expect(page.locator(".notice")).to_have_text("delete selected: 2 deleted")
    assert _listed(page) == [dead[0]]
    assert any_store.get(dead[0])["status"] == "dead" and any_store.get(ready)["status"] == "ready"


def test_cancel_makes_a_ready_job_dead(any_store, serve, page):
    from playwright.sync_api import expect
    job_id = any_store.enqueue_with("b.stop").id
    page.goto(serve() + f"/jobs/{job_id}")
    page.get_by_role("button", name="cancel").click()
    expect(page.locator(".notice")).to_have_text(f"job {job_id}: cancelled")
    row = any_store.get(job_id)
    assert row["status"] == "dead" and "cancelled" in row["last_error"]


def test_a_token_takes_a_login_and_a_wrong_one_is_refused(any_store, serve, page, watched):
    from playwright.sync_api import expect
    job_id = any_store.enqueue_with("b.secret").id
    base = serve("--token", "s3cret-token")
    page.goto(base + "/jobs")
    page.wait_for_url(re.compile(r"/login\?next=/jobs$"))
    expect(page.locator("#jobs")).to_have_count(0)
    page.fill("input[name=token]", "wrong")
    page.get_by_role("button", name="log in").click()
    expect(page.get_by_role("alert")).to_have_text("That is not the token.")
    watched.expect_error("status of 401")
    # The API takes the bearer token only: the page's own request without it is refused.
    assert page.request.get(base + "/api/stats").status == 401
    assert page.request.get(base + "/api/stats", headers={
        "Authorization": "Bearer s3cret-token"}).json()["ready"] == 1
    page.fill("input[name=token]", "s3cret-token")
    page.get_by_role("button", name="log in").click()
    page.wait_for_url(re.compile(r"/jobs$"))
    assert _listed(page) == [job_id]
    # The session acts too: a cancel after the login goes through.
    page.goto(base + f"/jobs/{job_id}")
    page.get_by_role("button", name="cancel").click()
    expect(page.locator(".notice")).to_have_text(f"job {job_id}: cancelled")
    page.get_by_role("button", name="log out").click()
    page.wait_for_url(re.compile(r"/login$"))
    page.goto(base + "/")
    page.wait_for_url(re.compile(r"/login\?next=/$"))


def test_read_only_draws_no_button(any_store, serve, page):
    from playwright.sync_api import expect
    job_id, = _dead_jobs(any_store, 1)
    page.goto(serve("--read-only") + f"/jobs/{job_id}")
    expect(page.locator("h1")).to_have_text(f"Job {job_id}: t.gone")
    expect(page.locator("form[method=post]")).to_have_count(0)
    expect(page.locator(".badge")).to_have_text("read-only")
    assert any_store.get(job_id)["status"] == "dead"


def test_pause_and_resume_from_the_overview_show_in_the_store(any_store, serve, page):
    from playwright.sync_api import expect
    any_store.enqueue_with("b.a", queue="q1")
    any_store.enqueue_with("b.a", queue="q2")
    page.goto(serve() + "/")
    page.locator("#queues tr", has_text="q1").get_by_role("button", name="pause").click()
    expect(page.locator(".notice")).to_have_text("queue q1: paused")
    expect(page.locator("#paused")).to_have_text("q1")
    assert any_store.paused_queues() == ["q1"]
    page.locator("#queues tr", has_text="q1").get_by_role("button", name="resume").click()
    expect(page.locator(".notice")).to_have_text("queue q1: resumed")
    expect(page.locator("#paused")).to_have_count(0)
    assert any_store.paused_queues() == []


def test_hostile_names_and_arguments_show_as_text_and_run_nothing(any_store, serve, page):
    from playwright.sync_api import expect
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    job_id = any_store.enqueue_with(HOSTILE_NAME, args=[HOSTILE], queue=HOSTILE_NAME).id
    base = serve()
    page.goto(base + "/jobs")
    expect(page.locator(f'#jobs tr.job[data-id="{job_id}"]')).to_contain_text(HOSTILE_NAME)
    page.goto(base + f"/jobs/{job_id}")
    expect(page.locator("h1")).to_have_text(f"Job {job_id}: {HOSTILE_NAME}")
    page.get_by_role("link", name="reveal").click()
    expect(page.locator("#data dl.data")).to_contain_text("<script>alert(1)</script> [bold]x[/bold]")
    page.goto(base + "/")
    expect(page.locator("#queues")).to_contain_text(HOSTILE_NAME)
    # Only the dashboard's own scripts: htmx and the overview's stream.
    assert page.locator("script").evaluate_all("s => s.map(e => e.getAttribute('src'))") == [
        "/static/htmx.min.js", "/static/live.js"]
    assert dialogs == []


def test_the_main_pages_as_screenshots(any_store, serve, page, tmp_path, request):
    """What the README shows: the overview, a filtered list, a job, the confirmation
    of an action on all matching, and the scheduled, queues, pools and batches pages;
    each a PNG of the page as Chromium draws it."""
    from playwright.sync_api import expect
    folder = Path(SCREENSHOTS) if SCREENSHOTS and "sqlite" in request.node.name else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(12):
        any_store.enqueue_with("reports.build", args=[n], queue="reports")
    any_store.enqueue_with("emails.send", args=["to@example.org"], queue="mail", delay=3600)
    dead = _dead_jobs(any_store, 4, name="imports.load")
    any_store.pause("mail")
    now = time.time()
    for minute in range(90):  # an hour and a half of a pool's rollups (R56)
        _counted(any_store, "reports.build", {"done": 20 + (minute * 7) % 13,
                                              "retried": minute % 5 // 4},
                 waited=0.05 + (minute % 9) / 20, ran=2 + (minute % 11) / 4,
                 at=now - minute * 60)
        _counted(any_store, "imports.load", {"done": 4, "dead": minute % 17 // 16},
                 waited=0.4, ran=12 + minute % 3, at=now - minute * 60)
    base = serve(by_file_name=True)
    shots = {"overview": "/", "jobs": "/jobs?status=dead", "job": f"/jobs/{dead[0]}",
             "retry-all": "/jobs/all/retry?status=dead&name=imports.load",
             "scheduled": "/scheduled", "queues": "/queues", "pools": "/pools",
             "batches": "/batches", "charts": "/charts"}
    page.set_viewport_size({"width": 1100, "height": 700})
    page.goto(base + "/")
    expect(page.locator("main h1").first).to_have_text("Store jobpool.db")
    for name, path in shots.items():
        page.goto(base + path)
        expect(page.locator("main h1")).to_be_visible()
        page.screenshot(path=str(folder / f"web-{name}.png"), full_page=True)
        assert (folder / f"web-{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_now_from_the_scheduled_page_and_from_a_jobs_page(any_store, serve, page):
    from playwright.sync_api import expect
    first, second = (any_store.enqueue_with("b.later", delay=3600).id for _ in range(2))
    base = serve()
    page.goto(base + "/scheduled")
    expect(page.locator("#scheduled tr.job")).to_have_count(2)
    page.locator(f'#scheduled tr.job[data-id="{first}"]').get_by_role(
        "button", name="run now").click()
    expect(page.locator(".notice")).to_have_text(f"job {first}: due now")
    expect(page.locator("#scheduled tr.job")).to_have_count(1)
    assert any_store.get(first)["run_at"] <= time.time() < any_store.get(second)["run_at"]
    page.goto(base + f"/jobs/{second}")
    expect(page.locator("#state")).to_contain_text("scheduled, due in")
    page.get_by_role("button", name="run now").click()
    expect(page.locator(".notice")).to_have_text(f"job {second}: due now")
    expect(page.locator("#state")).to_have_text("ready")
    expect(page.get_by_role("button", name="run now")).to_have_count(0)
    assert any_store.get(second)["run_at"] <= time.time()


def test_run_all_matching_now_goes_through_the_confirmation(any_store, serve, page):
    waiting = [any_store.enqueue_with("b.later", delay=3600, queue="q1").id for _ in range(3)]
    kept = any_store.enqueue_with("b.later", delay=3600, queue="q2").id
    _all_matching(page, serve() + "/scheduled?queue=q1", "run-now", "run 3 jobs now",
                  "run-now all matching: 3 due now")
    now = time.time()
    assert all(any_store.get(i)["run_at"] <= now for i in waiting)
    assert any_store.get(kept)["run_at"] > now


def test_scale_and_stop_a_pool_from_the_pools_page(any_store, serve, page):
    from playwright.sync_api import expect

    from tests.test_web_pages import _beat
    owner = "web-1:4242:1"
    _beat(any_store, owner)
    page.goto(serve() + "/pools")
    row = page.locator(f'#pools tr.pool[data-owner="{owner}"]')
    expect(row).to_contain_text("running")
    row.locator("input[name=procs]").fill("6")
    row.get_by_role("button", name="scale").click()
    expect(page.locator(".notice")).to_have_text(f"pool {owner}: asked to run 6 processes")
    page.locator(f'#pools tr.pool[data-owner="{owner}"]').get_by_role("button", name="stop").click()
    expect(page.locator(".notice")).to_have_text(f"pool {owner}: asked to stop")
    beat = _beat(any_store, owner)
    assert (beat.procs, beat.stop) == (6, True)


def test_cancel_a_batch_from_the_batches_page(any_store, serve, page):
    from playwright.sync_api import expect

    from jobpool.handles import Signature
    with any_store.batch() as made:
        members = [made.add(Signature("b.member", (n,))).id for n in range(2)]
    page.goto(serve() + "/batches")
    page.locator(f'#batches tr.batch[data-id="{made.id}"] a').click()
    page.wait_for_url(re.compile(rf"/batches/{made.id}$"))
    expect(page.locator("#members")).to_contain_text("ready")
    page.get_by_role("button", name="cancel").click()
    expect(page.locator(".notice")).to_have_text(f"batch {made.id}: cancelled")
    expect(page.locator("#batch-state")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="cancel")).to_have_count(0)
    assert [any_store.get(i)["status"] for i in members] == ["dead", "dead"]
    assert any_store.batch_status(made.id).cancelled


def test_the_queues_page_pauses_and_shows_limits(any_store, serve, page):
    from playwright.sync_api import expect
    any_store.enqueue_with("b.a", queue="q1")
    any_store.limits.set_queue("q1", 4)
    page.goto(serve() + "/queues")
    row = page.locator('#queues tr.queue[data-queue="q1"]')
    expect(row).to_contain_text("4 (0 running; set by cli)")
    row.get_by_role("button", name="pause").click()
    expect(page.locator(".notice")).to_have_text("queue q1: paused")
    expect(page.locator('#queues tr.queue[data-queue="q1"]')).to_contain_text("paused")
    assert any_store.paused_queues() == ["q1"]


def _asked(page) -> list[str]:
    """The paths the page asks the dashboard for, from now on."""
    paths: list[str] = []
    page.on("request", lambda r: paths.append(re.sub(r"^https?://[^/]+", "", r.url)))
    return paths


def test_the_overview_shows_a_new_job_without_a_reload(any_store, serve, page):
    from playwright.sync_api import expect
    any_store.enqueue_with("b.a", queue="q1")
    asked = _asked(page)
    page.goto(serve() + "/")
    expect(page.locator("#total-ready")).to_have_text("1")
    page.evaluate("window.notReloaded = true")
    any_store.enqueue_with("b.a", queue="q1")
    any_store.enqueue_with("b.b", queue="q7", delay=3600)
    # The shared snapshot's next refresh reaches the open page as a server-sent event.
    expect(page.locator("#total-ready")).to_have_text("2")
    expect(page.locator("#total-scheduled")).to_have_text("1")
    expect(page.locator("#queues")).to_contain_text("q7")
    assert page.evaluate("window.notReloaded") is True
    # Over the stream, not by polling: the page never asked for /live.
    assert "/events" in asked and "/live" not in asked, asked
    # A form that came over the stream acts (its CSRF token is this session's).
    page.locator('#queues tr:has-text("q7")').get_by_role("button", name="pause").click()
    expect(page.locator(".notice")).to_have_text("queue q7: paused")
    assert any_store.paused_queues() == ["q7"]


def _hidden(page, hidden: bool) -> None:
    """The tab hidden (another tab in front) or shown again, as the page sees it."""
    page.evaluate("""hidden => {
        Object.defineProperty(document, "hidden", {value: hidden, configurable: true});
        Object.defineProperty(document, "visibilityState",
                              {value: hidden ? "hidden" : "visible", configurable: true});
        document.dispatchEvent(new Event("visibilitychange"));
    }""", hidden)


def test_a_hidden_overview_lets_its_stream_go_and_takes_it_back(any_store, serve, page):
    from playwright.sync_api import expect
    any_store.enqueue_with("b.a", queue="q1")
    asked = _asked(page)
    page.goto(serve() + "/")
    expect(page.locator("#total-ready")).to_have_text("1")
    _hidden(page, True)
    any_store.enqueue_with("b.a", queue="q1")
    _hidden(page, False)
    # Shown again: a new stream, whose first event has the job enqueued meanwhile.
    expect(page.locator("#total-ready")).to_have_text("2")
    assert asked.count("/events") == 2 and "/live" not in asked, asked


def test_without_the_stream_the_overview_polls(any_store, serve, page, watched):
    from playwright.sync_api import expect
    any_store.enqueue_with("b.a", queue="q1")
    # A proxy in the way that does not pass the stream on: the page falls back to polling.
    page.route(re.compile(r"/events$"), lambda route: route.fulfill(status=502, body="no"))
    asked = _asked(page)
    page.goto(serve() + "/")
    expect(page.locator("#total-ready")).to_have_text("1")
    page.evaluate("window.notReloaded = true")
    any_store.enqueue_with("b.a", queue="q1")
    expect(page.locator("#total-ready")).to_have_text("2")
    assert page.evaluate("window.notReloaded") is True and "/live" in asked, asked
    watched.expect_error("502")


def test_enqueue_a_job_by_name_from_the_form(any_store, serve, page):
    from playwright.sync_api import expect
    page.goto(serve() + "/")
    page.get_by_role("link", name="enqueue").click()
    page.wait_for_url(re.compile(r"/enqueue$"))
    page.fill("input[name=name]", "b.by-name")
    page.fill("input[name=args]", '[1, "two"]')
    page.fill("input[name=queue]", "q3")
    page.get_by_role("button", name="enqueue").click()
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator(".notice")).to_have_text(f"queued job {job_id}")
    expect(page.locator("h1")).to_have_text(f"Job {job_id}: b.by-name")
    row = any_store.get(job_id)
    assert (row["queue"], row["status"]) == ("q3", "ready") and '"two"' in row["payload"]


def _counted(store, name: str, settled: dict[str, int], waited: float, ran: float,
             at: float | None = None) -> None:
    """A heartbeat's rollups of ``name`` written at ``at`` (now; PostgreSQL's beats are
    always now, on its clock), as a pool writes them (R56)."""
    from jobpool.store.records import Heartbeat
    from jobpool.supervisor.rollups import Rollups
    counted = Rollups()
    for outcome, count in settled.items():
        for _ in range(count):
            counted.claimed(name, waited)
            counted.settled(name, outcome, ran)
    store.heartbeat(Heartbeat(owner="charts-pool", host="h", pid=1, procs=1,
                              queues=("default",), names=(name,), core="pure",
                              counters_json="{}", slots_json="[]", rollups=counted.rows()),
                    (), time.time() if at is None else at)
    store.forget_pool("charts-pool")  # the rollups stay; no made-up pool is shown


@on_both_stores
def test_the_charts_page_draws_throughput_latency_and_run_time(any_store, serve, page):
    from playwright.sync_api import expect
    _counted(any_store, "charts.ok", {"done": 5, "retried": 2}, waited=0.3, ran=1.5)
    _counted(any_store, "charts.bad", {"dead": 1}, waited=4.0, ran=0.02)
    page.goto(serve() + "/")
    page.get_by_role("link", name="charts").click()
    expect(page.locator("#totals")).to_have_text("5 done, 2 retried, 1 dead")
    bars = page.locator("#throughput svg rect")
    expect(bars).to_have_count(3)
    for n in range(3):
        box = bars.nth(n).bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0
    for chart in ("#latency", "#run-time"):
        for q in ("p50", "p95"):
            dot = page.locator(f"{chart} svg circle.{q}")
            expect(dot).to_be_visible()  # one minute counted: one dot each
            assert dot.bounding_box()["height"] > 0
    page.locator("#by-name a", has_text="charts.bad").click()
    expect(page.locator("#totals")).to_have_text("0 done, 0 retried, 1 dead")
    expect(page.locator("#throughput svg rect")).to_have_count(1)
