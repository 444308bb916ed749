"""Actions on the jobs a person ticks (R47, issue 27): the jobs page's "… selected"
buttons and ``POST /api/jobs/bulk`` act on each chosen job as its own button would
(the store refuses a job whose status the action does not take), behind the CSRF
token, the login and write access, and each press is one ``web_action`` event naming
the ids.
"""
from __future__ import annotations

import logging
import re

import pytest

pytest.importorskip("starlette")

from tests.conftest import default_recursion_limit  # noqa: E402
from tests.test_web import (_client, _dead_jobs, _web_actions,  # noqa: E402, F401
                            store_url)

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")


def _selection_form(page: str) -> dict:
    form = page.split('id="selected"', 1)[1].split("</form>", 1)[0]
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form))


def test_retry_selected_retries_the_ticked_dead_jobs_only_and_is_one_event(
        any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    dead = _dead_jobs(any_store, 3)
    ready = any_store.enqueue_with("t.a", queue="q1").id
    with _client(store_url) as client:
        page = client.get("/jobs", params={"limit": "10"}).text
        for job_id in (*dead, ready):
            assert f'name="id" value="{job_id}" form="selected"' in page
        form = _selection_form(page)
        assert form["next"] == "/jobs?limit=10"
        answer = client.post("/jobs/selected", data={
            **form, "action": "retry", "id": [str(dead[0]), str(dead[2]), str(ready)]})
        assert answer.status_code == 303 and answer.headers["location"] == "/jobs?limit=10"
        assert "retry selected: 1 not dead (ready), 2 retried" in client.get("/jobs").text
    assert [any_store.get(i)["status"] for i in dead] == ["ready", "dead", "ready"]
    assert _web_actions(caplog) == [{"action": "retry", "who": "loopback", "selected": True,
                                     "job_ids": [dead[0], dead[2], ready],
                                     "result": {"retried": 2, "not dead (ready)": 1}}]


def test_cancel_delete_and_run_now_selected(any_store, store_url):
    ready = [any_store.enqueue_with("t.a").id for _ in range(2)]
    later = any_store.enqueue_with("t.a", delay=3600).id
    with _client(store_url) as client:
        form = _selection_form(client.get("/jobs").text)
        for action, ids, said in (
                ("run-now", [later], "run selected now: 1 due now"),
                ("cancel", ready, "cancel selected: 2 cancelled"),
                ("delete", ready, "delete selected: 2 deleted")):
            client.post("/jobs/selected", data={**form, "action": action,
                                                "id": [str(i) for i in ids]})
            assert said in client.get("/jobs").text
    assert [any_store.get(later)["status"]] == ["ready"]
    with _client(store_url) as client:
        for job_id in ready:
            assert client.get(f"/api/jobs/{job_id}").status_code == 404


def test_selected_needs_the_csrf_token_write_access_and_a_selection(any_store, store_url,
                                                                     caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    dead = _dead_jobs(any_store, 1)
    with _client(store_url) as client:
        form = _selection_form(client.get("/jobs").text)
        ids = {"action": "retry", "id": [str(dead[0])]}
        assert client.post("/jobs/selected", data=ids).status_code == 403
        assert client.post("/jobs/selected", data={**ids, "csrf": "forged"}).status_code == 403
        assert client.post("/jobs/selected", data={**form, "action": "explode",
                                                   "id": [str(dead[0])]}).status_code == 400
        assert client.post("/jobs/selected", data={**form, "action": "retry",
                                                   "id": ["1x"]}).status_code == 400
        nothing = client.post("/jobs/selected", data={**form, "action": "retry"})
        assert nothing.status_code == 303
        assert "select one job or more first" in client.get("/jobs").text
    with _client(store_url, read_only=True) as client:
        page = client.get("/jobs").text
        assert 'id="selected"' not in page and 'type="checkbox"' not in page
        assert client.post("/jobs/selected", data=ids).status_code == 403
    with _client(store_url, token="s3cret") as client:
        assert client.post("/jobs/selected", data=ids).status_code == 401
    assert any_store.get(dead[0])["status"] == "dead" and _web_actions(caplog) == []


def test_the_api_acts_on_chosen_ids_and_says_what_became_of_each(any_store, store_url,
                                                                caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    dead = _dead_jobs(any_store, 2)
    ready = any_store.enqueue_with("t.a").id
    json_body = {"content-type": "application/json"}
    with _client(store_url, token="s3cret") as client:
        bearer = {**json_body, "authorization": "Bearer s3cret"}
        body = {"action": "retry", "ids": [*dead, ready, 999999]}
        assert client.post("/api/jobs/bulk", json=body).status_code == 401
        answer = client.post("/api/jobs/bulk", json=body, headers=bearer)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"ok": True, "result": "1 no such job, 1 not dead (ready), "
                                                       "2 retried",
                                 "jobs": {str(dead[0]): "retried", str(dead[1]): "retried",
                                          str(ready): "not dead (ready)",
                                          "999999": "no such job"}}
        again = client.post("/api/jobs/bulk", json={"action": "delete", "ids": [ready]},
                            headers=bearer)
        assert again.status_code == 409 and again.json()["ok"] is False
        for wrong in ({"action": "retry"}, {"action": "retry", "ids": []},
                      {"action": "explode", "ids": [1]}, {"action": "retry", "ids": [True]},
                      {"action": "retry", "ids": list(range(1, 1002))}):
            assert client.post("/api/jobs/bulk", json=wrong, headers=bearer).status_code == 400
    assert [any_store.get(i)["status"] for i in dead] == ["ready", "ready"]
    with _client(store_url, read_only=True) as client:
        assert client.post("/api/jobs/bulk", json={"action": "retry", "ids": dead},
                           headers=json_body).status_code == 403
    assert [e["job_ids"] for e in _web_actions(caplog)] == [[*dead, ready, 999999], [ready]]
    assert {e["who"] for e in _web_actions(caplog)} == {"token"}


def test_a_whole_page_of_ticked_jobs_is_taken(any_store, store_url):
    # R47: a selection is 1 to 1 000 jobs, a jobs page's largest size; its form sends
    # them with its own fields, past Starlette's default of 1 000 fields: refused, 400.
    ids = list(any_store.enqueue_many("t.a", [(i,) for i in range(1000)]).ids)
    with _client(store_url) as client:
        page = client.get("/jobs", params={"limit": "1000"}).text
        assert page.count('form="selected"') >= 1000
        answer = client.post("/jobs/selected", data={
            **_selection_form(page), "action": "cancel", "id": [str(i) for i in ids]})
        assert answer.status_code == 303, answer.text
        assert "cancel selected: 1000 cancelled" in client.get("/jobs").text
    assert any_store.stats()["dead"] == 1000


def test_a_cancel_of_a_job_gone_since_the_page_was_drawn_is_its_answer(any_store, store_url):
    # R47: another operator deleted it meanwhile; the store's answer, not a 500.
    kept = any_store.enqueue_with("t.a").id
    with _client(store_url) as client:
        answer = client.post("/api/jobs/999999/cancel", json={})
        assert answer.status_code == 409 and answer.json()["result"] == "no such job"
        answer = client.post("/api/jobs/bulk", json={"action": "cancel", "ids": [kept, 999999]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["jobs"] == {str(kept): "cancelled", "999999": "no such job"}
        form = _selection_form(client.get("/jobs").text)
        assert client.post("/jobs/999999/cancel", data={"csrf": form["csrf"]}).status_code == 303
        assert "job 999999: no such job" in client.get("/jobs").text
    assert any_store.get(kept)["status"] == "dead"


def test_an_id_past_a_stores_range_is_refused_naming_it(any_store, store_url):
    # A 64-bit store has no such id: a 400 naming it in a selection, a 404 in an address,
    # not the driver's overflow (a 500).
    huge = 10**20
    any_store.enqueue_with("t.a")  # a jobs page with its selection form, for its token
    with _client(store_url) as client:
        answer = client.post("/api/jobs/bulk", json={"action": "cancel", "ids": [2**63]})
        assert answer.status_code == 400 and str(2**63) in answer.text, answer.text
        token = _selection_form(client.get("/jobs").text)["csrf"]
        for method, path, sent in (
                ("GET", f"/api/jobs/{huge}", None), ("POST", f"/api/jobs/{huge}/cancel", {}),
                ("DELETE", f"/api/jobs/{huge}", None), ("GET", f"/api/batches/{huge}", None),
                ("GET", f"/jobs/{huge}", None), ("GET", f"/batches/{huge}", None)):
            answer = client.request(method, path, json=sent)
            assert answer.status_code == 404, (path, answer.status_code, answer.text)
        answer = client.post(f"/jobs/{huge}/cancel", data={"csrf": token})
        assert answer.status_code == 404 and "at most" in answer.text


def test_json_nested_past_the_decoders_depth_is_a_400(any_store, store_url):
    # json.loads raises RecursionError past the interpreter's recursion limit: it was a
    # 500. The test client serves in this process, whose limit a test library may have
    # raised (and past a high one, the decoder's C stack would overflow): the default's
    # for the request.
    depth = 5000
    with default_recursion_limit(), _client(store_url) as client:
        answer = client.post("/api/jobs", content="[" * depth + "]" * depth,
                             headers={"content-type": "application/json"})
    assert answer.status_code == 400 and "nested too deeply" in answer.text, answer.text
