"""R59 (issue 28, item 5): a chain step given its predecessor's result. The store
writes the result into the step's arguments in the transaction that ends the
predecessor, on both stores, through real pools; what could never work is refused
at the enqueue, naming it, with nothing written."""
from __future__ import annotations

import json

import pytest

import jobpool
from jobpool import job
from jobpool.errors import EnqueueError
from jobpool.handles import Signature
from jobpool.store import row_codec

APP = """
import json
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

def seen(*items):
    with open(HERE / "seen.jsonl", "a") as fh:
        fh.write(json.dumps(items) + "\\n")

@job(name="cr.count", store_result=True)
def count(path):
    return {"path": path, "rows": 3, "text": "ü <b>"}

@job(name="cr.add", store_result=True)
def add(extra, counted):
    seen("add", extra, counted)
    return counted["rows"] + extra

@job(name="cr.report")
def report(previous=None, note="plain"):
    seen("report", previous, note)

@job(name="cr.quiet")
def quiet():
    return "never kept"

@job(name="cr.pickled", store_result=True, serializer="pickle")
def pickled():
    return {1, 2}
"""


def _seen(app) -> list:
    path = app.dir / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _by_name(store, name: str) -> list[dict]:
    return [j for j in store.list_jobs(limit=100) if j["name"] == name]


def test_each_step_is_called_with_what_the_one_before_returned(make_any_app):
    """R59, R12: ``with_previous`` names the keyword; a step that asks for nothing
    gets its own arguments only; the values are the stored JSON, unicode and markup
    kept as data."""
    app = make_any_app(APP)
    store = app.store()
    first = store.enqueue_with("cr.count", args=["a.csv"], then=[
        Signature("cr.add", (10,)).with_previous("counted"),
        Signature("cr.report").with_previous(),
        Signature("cr.report", kwargs={"note": "last"})]).id
    app.start("--procs", "1")
    counted = {"path": "a.csv", "rows": 3, "text": "ü <b>"}
    assert _seen(app) == [["add", 10, counted], ["report", 13, "plain"],
                          ["report", None, "last"]]
    [add_row] = _by_name(store, "cr.add")
    assert add_row["status"] == "done" and store.get(first)["last_error"] is None
    assert jobpool.Handle(add_row["id"], store=store).result(timeout=5) == 13
    store.close()


def test_a_predecessor_that_keeps_no_result_passes_none(make_any_app):
    """R59: a predecessor this producer does not register (so nothing refused the
    chain) that keeps no result: the step still runs, given None."""
    app = make_any_app(APP)
    store = app.store()
    store.enqueue_with("cr.quiet", then=Signature("cr.report").with_previous())
    app.start("--procs", "1")
    assert _seen(app) == [["report", None, "plain"]]
    store.close()


def test_a_pickled_result_stops_the_chain_saying_why(make_any_app):
    """R59, R44: only a JSON result is passed on. A pickled one stops the chain: the
    predecessor stays done, says why in its error, and no step is enqueued; the pool
    goes on with the next job."""
    app = make_any_app(APP)
    store = app.store()
    first = store.enqueue_with("cr.pickled", then=Signature("cr.report").with_previous()).id
    after = store.enqueue_with("cr.report", kwargs={"note": "after"}).id
    app.start("--procs", "1")
    row = store.get(first)
    assert row["status"] == "done"
    assert row["last_error"].startswith(row_codec.CHAIN_STOPPED)
    assert _seen(app) == [["report", None, "after"]]
    assert store.get(after)["status"] == "done"
    assert sorted(j["id"] for j in store.list_jobs(limit=100)) == sorted([first, after])
    store.close()


# -- refused at the enqueue, nothing written ------------------------------------------------

@job(name="cr.kept", store_result=True)
def kept():
    return 1


@job(name="cr.unkept")
def unkept():
    return 1


@job(name="cr.pickle_kept", store_result=True, serializer="pickle")
def pickle_kept():
    return 1


@job(name="cr.takes")
def takes(previous=None, other=None):
    pass


@job(name="cr.takes_nothing")
def takes_nothing():
    pass


def _batch_callback(store):
    store.batch(on_success=takes.s().with_previous())


@pytest.mark.parametrize("call, words", [
    (lambda s: s.enqueue_with("cr.unkept", then=takes.s().with_previous()),
     "asks for the result of cr.unkept, which keeps none"),
    (lambda s: s.enqueue_with("cr.pickle_kept", then=takes.s().with_previous()),
     "stores it with pickle"),
    (lambda s: s.enqueue_with("cr.kept", then=[takes.s(), takes.s().with_previous()]),
     "then[1]: cr.takes asks for the result of cr.takes, which keeps none"),
    (lambda s: s.enqueue_with("cr.kept", then=takes.s().with_previous("other-name")),
     "with_previous takes a keyword argument's name"),
    (lambda s: s.enqueue_with("cr.kept", then=takes.s().with_previous("class")),
     "with_previous takes a keyword argument's name"),
    (lambda s: s.enqueue_with("cr.kept", then=takes.s(other=1).with_previous("other")),
     "is given other= by its predecessor; it cannot have its own"),
    (lambda s: s.enqueue_with("cr.kept", then=takes_nothing.s().with_previous()),
     "then[0]: job cr.takes_nothing: the arguments do not fit takes_nothing(): got an "
     "unexpected keyword argument 'previous'"),
    (lambda s: s.enqueue_many("cr.takes", [takes.s().with_previous()]),
     "item 0: cr.takes asks for its predecessor's result"),
    (_batch_callback, "on_success: cr.takes asks for its predecessor's result"),
    (lambda s: s.batch().add(takes.s().with_previous()),
     "Batch.add: cr.takes asks for its predecessor's result"),
])
def test_a_step_that_could_never_get_a_result_is_refused_naming_it(any_store, call, words):
    with pytest.raises(EnqueueError) as caught:
        call(any_store)
    assert words in str(caught.value)
    assert any_store.list_jobs(limit=10) == []


def test_a_stored_step_whose_keyword_is_not_a_name_is_flagged():
    """R44, R59: the store writes a JSON path from the keyword, so a chain row whose
    step names anything but an identifier (written by hand) is malformed, named."""
    step = {"name": "x", "queue": "default", "payload": "[[],{}]", "priority": 0}
    assert row_codec.chain(json.dumps([{**step, "previous": "ok_name"}])) is None
    for bad in (5, "a.b", "a'b", "", "for"):
        why = row_codec.chain(json.dumps([{**step, "previous": bad}]))
        assert why is not None and why.startswith("step 0: previous:")


def test_a_pickled_result_of_a_json_row_reads_back(make_any_app):
    """R39's sibling: a job registered with pickle whose row was written as JSON (an
    enqueue by name, a chain step) keeps a pickled result; ``result`` with
    ``allow_pickle`` reads it back rather than parse it as JSON."""
    app = make_any_app(APP)
    store = app.store()
    handle = store.enqueue_with("cr.pickled")
    app.start("--procs", "1")
    assert handle.result(timeout=5, allow_pickle=True) == {1, 2}
    store.close()


_drained: list = []


@job(name="cr.total", store_result=True)
def total(*numbers):
    return sum(numbers)


@job(name="cr.double", store_result=True)
def double(previous):
    _drained.append(previous)
    return previous * 2


def test_a_drain_in_a_test_passes_results_down_the_chain(any_store):
    """R59 under ``jobpool.testing.drain``: the same store statements as a pool."""
    from jobpool.testing import drain
    _drained.clear()
    any_store.enqueue_with("cr.total", args=[1, 2, 3],
                           then=[double.s().with_previous(), double.s().with_previous()])
    assert drain(any_store).done == 3
    assert _drained == [6, 12]
