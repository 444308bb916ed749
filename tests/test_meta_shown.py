"""R67 (issue 28): a job's metadata (R54) where an operator looks at the job: the
terminal dashboard's running jobs (`jobpool top`, wide), `jobs list` (and `--json`),
`jobs show`, the web overview's running jobs, the web job list and job page. Keys and
values are text from jobs (R46): brackets print as brackets, an escape byte is written
out, a tag is HTML text. On both stores."""
from __future__ import annotations

import json

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")

#: Metadata as hostile as a key and a value can be: rich markup, an escape sequence
#: (its ESC byte must never reach a terminal) and a tag, in pairs short enough that
#: the wide dashboard's meta column shows them whole.
HOSTILE_META = {"tenant": "acme", "[b]\x1b[2J": "<i>x</i>"}
#: How the one-line form shows it (`jobs list --meta` reads each pair back).
HOSTILE_LINE = "tenant=acme [b]\\x1b[2J=<i>x</i>"
HOSTILE_HTML = "tenant=acme [b]\\x1b[2J=&lt;i&gt;x&lt;/i&gt;"

HOLD_APP = """
import os
import time
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="m.hold", timeout=120)
def hold(tag):
    (HERE / f"running.{tag}").touch()
    while not (HERE / "go").exists():
        time.sleep(0.05)
"""


def _assert_no_escape_byte(text: str) -> None:
    assert "\x1b" not in text, repr(text)


def test_a_running_jobs_metadata_is_on_the_dashboards_and_in_the_lists(make_any_app):
    """A pool runs a job with metadata and one without: `jobpool top --once` on a wide
    terminal has a meta column with the job's pairs (at 80 columns there is no room for
    one); `jobs list` shows them in a column and `--json` as the object; `jobs show`
    as JSON; the web overview's running jobs and the job list show the pairs as text."""
    from starlette.testclient import TestClient

    from jobpool.web import create_app
    app = make_any_app(HOLD_APP)
    store = app.store()
    tagged = store.enqueue_with("m.hold", args=("tagged",), meta=HOSTILE_META).id
    plain = store.enqueue_with("m.hold", args=("plain",)).id
    pool = app.spawn("--procs", "2")
    try:
        wait_for(lambda: all((app.dir / f"running.{t}").exists() for t in ("tagged", "plain")),
                 timeout=60)
        from jobpool.snapshot import read_snapshot
        wait_for(lambda: {s.job_id for s in read_snapshot(store).slots} >= {tagged, plain},
                 timeout=30)

        app.env["COLUMNS"] = "160"
        wide = app.cli("top", "--once", "--db", str(app.db), check=True).stdout
        _assert_no_escape_byte(wide)
        header = next(line for line in wide.splitlines() if " job " in f" {line} "
                      and "progress" in line)
        assert " meta " in header, wide
        assert HOSTILE_LINE in next(line for line in wide.splitlines()
                                    if f" {tagged} " in line and "m.hold" in line), wide
        app.env["COLUMNS"] = "80"
        narrow = app.cli("top", "--once", "--db", str(app.db), check=True).stdout
        assert "tenant=acme" not in narrow and str(tagged) in narrow, narrow
        app.env["COLUMNS"] = "120"

        listed = app.cli("jobs", "list", "--db", str(app.db), check=True).stdout
        _assert_no_escape_byte(listed)
        assert " meta " in listed.splitlines()[0]
        assert HOSTILE_LINE in next(line for line in listed.splitlines()
                                    if line.split()[0] == str(tagged)), listed
        as_json = json.loads(app.cli("jobs", "list", "--db", str(app.db), "--json",
                                     check=True).stdout)
        assert {job["id"]: job["meta"] for job in as_json} == {tagged: HOSTILE_META,
                                                               plain: None}
        shown = app.cli("jobs", "show", str(tagged), "--db", str(app.db), check=True).stdout
        _assert_no_escape_byte(shown)
        assert '"[b]\\u001b[2J": "<i>x</i>"' in shown and '"tenant": "acme"' in shown, shown

        with TestClient(create_app(str(app.db)), follow_redirects=False) as client:
            overview = client.get("/").text
            jobs_page = client.get("/jobs").text
        running = overview.split('id="running"', 1)[1].split("</table>", 1)[0]
        assert "<th>meta</th>" in running
        assert (f'data-id="{tagged}"' in running
                and f'<td class="meta">{HOSTILE_HTML}</td>' in running), running
        listed_rows = jobs_page.split('id="jobs"', 1)[1].split("</table>", 1)[0]
        tagged_row = listed_rows.split(f'data-id="{tagged}"', 1)[1].split("</tr>", 1)[0]
        plain_row = listed_rows.split(f'data-id="{plain}"', 1)[1].split("</tr>", 1)[0]
        assert f'<td class="meta">{HOSTILE_HTML}</td>' in tagged_row, tagged_row
        assert '<td class="meta"></td>' in plain_row, plain_row
        for page in (overview, jobs_page):
            assert "<i>x</i>" not in page and "\x1b" not in page
    finally:
        (app.dir / "go").touch()
        wait_for(lambda: store.get(tagged)["status"] == "done"
                 and store.get(plain)["status"] == "done", timeout=60)
        pool.terminate()
        pool.wait(timeout=60)
        store.close()


def test_listings_without_metadata_keep_their_columns(make_any_app):
    """A store whose jobs have no metadata lists them as before: no meta column in
    `jobs list`, `--json` says null."""
    app = make_any_app(HOLD_APP)
    store = app.store()
    store.enqueue_with("m.hold", args=("x",))
    store.close()
    listed = app.cli("jobs", "list", "--db", str(app.db), check=True).stdout
    assert listed.splitlines()[0].split() == ["id", "name", "queue", "status", "attempts",
                                              "key", "last", "error"]
    assert [job["meta"] for job in json.loads(app.cli(
        "jobs", "list", "--db", str(app.db), "--json", check=True).stdout)] == [None]


@pytest.mark.parametrize("value, line", [
    ("acme", "k=acme"), ("7", 'k="7"'), ("true", 'k="true"'), (7, "k=7"), (None, "k=null"),
    ("two words", 'k="two words"'), ("a=b", 'k="a=b"'), ({"n": [1]}, 'k={"n":[1]}')])
def test_each_pair_shows_as_jobs_list_meta_reads_it_back(value, line):
    """The one-line form is what ``--meta KEY=VALUE`` reads back: a text that would
    read as a number, a boolean or null is quoted, as is one a space or ``=`` would
    split."""
    from jobpool.cli import _meta_pair
    from jobpool.display import meta_text
    assert meta_text({"k": value}) == line
    if not isinstance(value, dict):
        assert _meta_pair(line) == ("k", value)



DEAD_APP = """
from jobpool import job, Fatal

@job(name="m.fails")
def fails():
    raise Fatal("no")
"""


def test_a_dead_jobs_metadata_is_in_the_dead_letters(make_any_app):
    """R67: `dead list` (and `--json`) and the web dead-letters page show a dead job's
    metadata beside it, escaped as text; a dead job without any shows an empty cell."""
    from starlette.testclient import TestClient

    from jobpool.web import create_app
    app = make_any_app(DEAD_APP)
    store = app.store()
    tagged = store.enqueue_with("m.fails", meta=HOSTILE_META).id
    plain = store.enqueue_with("m.fails").id
    app.start("--procs", "1")
    app.env["COLUMNS"] = "200"
    listed = app.cli("dead", "list", "--db", str(app.db), check=True).stdout
    _assert_no_escape_byte(listed)
    assert listed.splitlines()[0].split()[:4] == ["id", "name", "attempts", "meta"]
    [line] = [line for line in listed.splitlines() if line.split()[:1] == [str(tagged)]]
    assert "tenant=acme" in line
    as_json = {job["id"]: job["meta"] for job in json.loads(app.cli(
        "dead", "list", "--db", str(app.db), "--json", check=True).stdout)}
    assert as_json == {tagged: HOSTILE_META, plain: None}
    with TestClient(create_app(str(app.db))) as client:
        page = client.get("/dead").text
    assert f'<td class="meta">{HOSTILE_HTML}</td>' in page
    assert '<td class="meta"></td>' in page
    assert "<i>x</i>" not in page and "\x1b" not in page
    store.close()
