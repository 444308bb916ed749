"""Parity: the compiled SQLite driver and the pure one, each under the engine, fed one
random sequence of operations over two identical stores, return the same answers
(types included) and leave the same rows behind (STYLE habit 2). The transitions are
``lifecycle.decide``'s and the statements the driver's own: what is compared is the
road each takes to SQLite (rows, answers and the result code of a failure, never an
exception's wording), and the claim's codec answered in C against ``row_codec``."""
import collections
import os
import random
import shutil
import sqlite3
import tempfile

import pytest

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from jobpool import lifecycle as P
from jobpool import _core_py, bounds, channel, protocol
from jobpool.lifecycle import Outcome
from jobpool.queueplan import Share
from jobpool.store import row_codec
from jobpool.store.sqlite.claimer import SqliteClaimer
from jobpool.store.sqlite.driver import SqliteDriver
from jobpool.store.sqlite import statements as sql

from .conftest import ATTEMPT_LINES

NAMES = ["alpha", "beta", "gamma"]
QUEUES = ("a", "b")
POLICIES = {"alpha": (0.5, 10.0, 2, 3, 20.0), "beta": (0.0, 5.0, 3, 4, 45.0)}
T0 = 1_700_000_000.0


def make_store(path, seed, njobs, members=False):
    """``njobs`` random rows; with ``members``, half of them members of four closed
    batches with callbacks (R34), whose ends the batches count."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for stmt in sql.SCHEMA:
        conn.execute(stmt)
    conn.execute("BEGIN")
    batches = []
    if members:
        from jobpool.handles import Signature
        from jobpool.serialize import MAX_PAYLOAD_BYTES
        from jobpool.store.batch_store import callback_json
        callback = callback_json(Signature("alpha"), "on_complete", MAX_PAYLOAD_BYTES)
        for batch_id in range(1, 5):
            conn.execute("INSERT INTO jobpool_batches (id, created_at, changed_at, closed_at, "
                         "on_success, on_complete) VALUES (?, ?, ?, ?, ?, ?)",
                         (batch_id, T0 - 200, T0 - 200, T0 - 150, callback, callback))
            batches.append(batch_id)
    for i in range(njobs):
        queue = rng.choice(["a", "a", "b", "c"])
        name = rng.choice(NAMES + ["unknown"])
        key = f"k{i}" if rng.random() < 0.3 else None
        payload = (f'{{"i": {i}, "s": "é"}}' if rng.random() < 0.3
                   else f"payload-{i}".encode() + bytes([0, 255]))
        serializer = rng.choice(["json", "pickle"])
        priority = rng.choice([-1, 0, 0, 1, 2])
        run_at = T0 + rng.choice([0, 0, 5, 30, 300]) + rng.random()
        if rng.random() < 0.2:
            run_at = T0 + 1.0       # ties on line_at: id decides
        max_attempts = rng.choice([1, 2, 3, 5, None])
        deadline = None if rng.random() < 0.6 else T0 + rng.choice([-10, 20, 100, 1000, 10000])
        if deadline is not None and rng.random() < 0.3:
            deadline = int(deadline)   # INTEGER-valued REAL
        timeout = rng.choice([5.0, 30.0, 60, 600.0, None])
        chain = None
        if rng.random() < 0.25:
            import json
            chain = json.dumps([{"name": rng.choice(NAMES), "payload": f"[[{j}],{{}}]",
                                 "queue": rng.choice(["a", "b"]), "priority": rng.choice([0, 3]),
                                 "max_attempts": rng.choice([2, None]), "timeout": rng.choice([10.0, None])}
                                for j in range(rng.randint(1, 3))])
        batch = rng.choice(batches) if batches and rng.random() < 0.5 else None
        conn.execute(sql.INSERT_JOB, (queue, name, key, payload, serializer, priority, run_at,
                                      run_at, max_attempts, deadline, timeout, T0 - 100, chain, batch,
                                      None, None))
        if batch is not None:
            conn.execute("UPDATE jobpool_batches SET total = total + 1 WHERE id = ?", (batch,))
    conn.execute("COMMIT")
    conn.close()


def dump(path):
    conn = sqlite3.connect(path)
    jobs = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    attempts = conn.execute("SELECT rowid, * FROM attempts ORDER BY rowid").fetchall()
    lines = conn.execute(f"SELECT * FROM {ATTEMPT_LINES}").fetchall()  # R61: successes too
    batches = conn.execute("SELECT * FROM jobpool_batches ORDER BY id").fetchall()
    conn.close()
    return jobs, attempts, lines, batches


def call(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # noqa: BLE001
        code = getattr(exc.__cause__, "sqlite_errorcode", None)
        # SQLite's primary result code: what the failure was, whichever road met it.
        return ("exc", type(exc).__name__, None if code is None else code & 0xFF)


def typed(value):
    """Compare values *and* types (1 == 1.0 == True is not parity)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, value)


class Mismatch(AssertionError):
    pass


def same(label, a, b):
    if typed(a) != typed(b):
        raise Mismatch(f"{label}:\n  pure:     {a!r}\n  compiled: {b!r}")


def random_outcome(rng, job_id, attempt):
    kind = rng.choices(range(10), weights=[6, 5, 1, 4, 2, 2, 2, 1, 1, 1])[0]
    error = rng.choice([None, "boom", "ValueError: bad", "child killed by SIGSEGV",
                        "child exited with status 3"]) if kind != P.DONE else None
    if kind == P.CRASH and error is None and rng.random() < 0.8:
        error = "child killed by SIGKILL"
    delay = rng.choice([None, 0, 0.5, 2, 45.0, 5000.0])
    result = rng.choice([None, b"\x00res", "text-result", 7, 2.5]) if kind == P.DONE else None
    pid = rng.choice([None, 1234, 99999])
    exit_status = rng.choice([None, "exit 0", "signal 9"])
    peak_rss = rng.choice([None, 123456789, 0])
    cpu_s = rng.choice([None, 0.25, 3.0])
    return Outcome(job_id, attempt, kind, error, delay, result, pid, exit_status, peak_rss, cpu_s)


def run(compiled, seed, tmpdir, steps=300, njobs=120, queues=QUEUES, shared=False,
        members=False):
    tmp = tempfile.mkdtemp(prefix="jp_parity_", dir=tmpdir)
    paths = {}
    for impl in ("pure", "compiled"):
        paths[impl] = os.path.join(tmp, f"{impl}.db")
        make_store(paths[impl], seed, njobs, members)
    from jobpool.store.sqlite.compiled import CompiledSqliteDriver
    cores = {
        "pure": SqliteClaimer(paths["pure"], "sup-1", NAMES, queues, POLICIES,
                              driver=SqliteDriver, busy_timeout=0.05),
        "compiled": SqliteClaimer(paths["compiled"], "sup-1", NAMES, queues, POLICIES,
                                  driver=CompiledSqliteDriver, busy_timeout=0.05),
    }
    rngs = {impl: random.Random(seed * 7 + 1) for impl in cores}
    drv = random.Random(seed)
    now = T0
    held = {}          # job_id -> attempt as returned by claim (driver's view)
    stale = []         # (job_id, attempt) no longer held: settling them must be "lost"
    stats = collections.Counter()

    def both(label, method, *args, rng_arg=False):
        res = {}
        for impl, core in cores.items():
            a = args + ((rngs[impl],) if rng_arg else ())
            res[impl] = call(getattr(core, method), *a)
        same(f"step {step} {label}", res["pure"], res["compiled"])
        same(f"step {step} inflight after {label}", cores["pure"].inflight, cores["compiled"].inflight)
        return res["pure"]

    for step in range(steps):  # noqa: B007 - read by both() through its closure
        now += drv.choice([0.0, 0.5, 1.0, 3.0, 10.0, 60.0])
        if drv.random() < 0.03:
            now += drv.choice([120.0, 700.0, 5000.0])   # let leases expire
        op = drv.random()
        if op < 0.35:
            n = drv.choice([0, 1, 1, 2, 3, 8])
            if shared and drv.random() < 0.5:
                # R38: a turn that claims by shares (weights, paused queues), as a pool's;
                # R68: the compiled step claims by them too.
                shares = drv.choice([None, tuple(Share(q, n) for q in queues),
                                     tuple(Share(q, drv.choice([0, 1, 2, n])) for q in queues),
                                     tuple(Share(q, 1) for q in reversed(queues))])
                r = both(f"turn({n}, {shares})", "turn", [], n, now, None, shares)
                r = (r[0], r[1][1:]) if r[0] == "ok" else r
            else:
                r = both(f"claim({n})", "claim", n, now)
            if r[0] == "ok":
                claimed, expired = r[1]
                for job in claimed:
                    held[job[0]] = job[4]
                    stats["claimed"] += 1
                for item in expired:
                    stats[f"expired:{item[3]}"] += 1
        elif op < 0.75 and (held or stale):
            batch = []
            for job_id in drv.sample(sorted(held), min(len(held), drv.choice([1, 1, 2, 4]))):
                batch.append(random_outcome(drv, job_id, held[job_id]))
            if stale and drv.random() < 0.3:
                job_id, attempt = drv.choice(stale)
                batch.append(random_outcome(drv, job_id, attempt))
            if batch and drv.random() < 0.1:
                batch.append(batch[0])                          # settled twice in one batch
            if batch and drv.random() < 0.1:
                o = batch[0]
                batch.append((o[0], o[1] + 1) + o[2:])          # wrong attempt
            if drv.random() < 0.05:
                batch.append(random_outcome(drv, 999999, 1))    # never leased
            r = both(f"settle({batch})", "settle", batch, now, rng_arg=True)
            if r[0] == "ok":
                for item in r[1]:
                    stats[f"settled:{item[3]}"] += 1
                    reason = item[4] or ""
                    for tag in ("quarantined", "no attempts left", "retry would fall past",
                                "deferred past", "not leased", "lease lost"):
                        if tag in reason:
                            stats[f"reason:{tag}"] += 1
                    if item[0] in held:
                        stale.append((item[0], held.pop(item[0])))
            else:
                stats[f"settle-exc:{r[1]}"] += 1
        elif op < 0.82:
            r = both("reclaim", "reclaim", now)
            if r[0] == "ok":
                for item in r[1]:
                    stats[f"reclaimed:{item[3]}"] += 1
        elif op < 0.86:
            # A ghost supervisor takes some ready rows; we notice and reclaim them.
            for path in paths.values():
                conn = sqlite3.connect(path, isolation_level=None)
                conn.execute("UPDATE jobs SET status='running', lease_owner='ghost', attempts=attempts+1,"
                             " lease_expires_at=? WHERE id IN (SELECT id FROM jobs WHERE status='ready'"
                             " ORDER BY id LIMIT 3)", (now + 1e6,))
                conn.close()
            owners = both("lease_owners", "lease_owners")
            stats["owners"] += 1
            if owners[0] == "ok" and "ghost" in owners[1]:
                r = both("reclaim_owner", "reclaim_owner", "ghost", "supervisor ghost died", now)
                for item in r[1] if r[0] == "ok" else []:
                    stats[f"reclaimed-owner:{item[3]}"] += 1
            both("reclaim_owner(self)", "reclaim_owner", "sup-1", "x", now)
        elif op < 0.89:
            # Locked store: another writer holds BEGIN IMMEDIATE.
            lockers = []
            for path in paths.values():
                conn = sqlite3.connect(path, isolation_level=None)
                conn.execute("BEGIN IMMEDIATE")
                lockers.append(conn)
            r = both("claim locked", "claim", 2, now)
            stats[f"locked-claim:{r[1:3]}"] += 1
            if held:
                job_id = sorted(held)[0]
                both("settle locked", "settle", [random_outcome(drv, job_id, held[job_id])], now,
                     rng_arg=True)
            both("reclaim locked", "reclaim", now)
            both("lease_owners locked", "lease_owners")
            stats["locked"] += 1
            for conn in lockers:
                conn.execute("ROLLBACK")
                conn.close()
        else:
            both("inflight", "__getattribute__", "inflight")

    # R68: how many turns the compiled driver stepped whole in C (the pure one has none).
    assert cores["pure"].plain_turns == 0
    stats["plain_turns"] = cores["compiled"].plain_turns
    for core in cores.values():
        core.close()
    dp, dc = dump(paths["pure"]), dump(paths["compiled"])
    same("final jobs", dp[0], dc[0])
    same("final attempts", dp[1], dc[1])
    same("final attempt lines", dp[2], dc[2])
    same("final batches", dp[3], dc[3])
    if members:
        stats["batches finished"] = sum(row[8] is not None for row in dp[3])
        stats["members ended"] = sum(row[4] + row[5] for row in dp[3])
    outcomes = collections.Counter(row[6] for row in dp[2])
    statuses = collections.Counter(row[7] for row in dp[0])
    shutil.rmtree(tmp)
    return stats, outcomes, statuses



@pytest.mark.c_extension
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_driver_matches_the_pure_one(compiled_core, seed, tmp_path):
    stats, outcomes, statuses = run(compiled_core, seed, tmp_path)
    # The sequence really exercised the branches it is meant to compare.
    assert stats["claimed"] > 50
    assert sum(v for k, v in stats.items() if k.startswith("settled:")) > 50
    assert {"done", "error"} <= set(outcomes)
    assert {"done", "ready"} <= set(statuses)


@pytest.mark.c_extension
@pytest.mark.parametrize("seed", range(3))
def test_the_compiled_plain_turn_matches_the_engines_turn(compiled_core, seed, tmp_path):
    # R68: with one queue, a claim, and a settle of successes only, runs whole in C
    # (``plain_turn``); the engine's own turn takes every other one, and a turn whose
    # claim meets a row past its deadline (R10) or one the codec must read (R44).
    stats, outcomes, statuses = run(compiled_core, seed + 10, tmp_path, queues=("a",))
    assert stats["plain_turns"] > 30, stats
    assert stats["claimed"] > 30
    assert {"done", "error"} <= set(outcomes)


@pytest.mark.c_extension
@pytest.mark.parametrize("seed", range(3))
def test_the_compiled_plain_turn_claims_by_shares_as_the_engine_does(compiled_core, seed,
                                                                    tmp_path):
    # R38, R68: a claim shared among queues (strict order, weights, quotas of 0) is
    # stepped in C with the shares' two passes, and answers as the engine's turn.
    stats, outcomes, statuses = run(compiled_core, seed + 20, tmp_path, queues=("a", "b", "c"),
                                    shared=True)
    assert stats["plain_turns"] > 30, stats
    assert stats["claimed"] > 30
    assert {"done", "error"} <= set(outcomes)


@pytest.mark.c_extension
@pytest.mark.parametrize("seed", range(3))
def test_the_compiled_plain_turn_counts_batch_members_as_the_engine_does(compiled_core, seed,
                                                                        tmp_path):
    # R34, R68: a success of a batch's member with no chain is settled in C with its
    # batch's count (the batch's callbacks fire in the same transaction when it is the
    # last), and leaves the rows and batches the engine's own turn leaves.
    stats, outcomes, statuses = run(compiled_core, seed + 30, tmp_path, queues=("a",),
                                    members=True)
    assert stats["plain_turns"] > 30, stats
    assert stats["members ended"] > 20, stats
    assert {"done", "error"} <= set(outcomes)


def test_the_compiled_core_shares_pythons_libsqlite3(compiled_core):
    """Two copies of SQLite in one process can break each other's POSIX locks."""
    import sqlite3 as _sqlite3  # noqa: F401 - load Python's own binding first
    with open("/proc/self/maps") as fh:
        libraries = {line.split()[-1] for line in fh if "libsqlite3" in line}
    assert len(libraries) == 1, libraries
    with open(compiled_core.__file__, "rb") as fh:
        assert b"sqlite3_open_v2" in fh.read()  # resolved from that library, not bundled


# -- the claim's codec, answered in C (R44) ------------------------------------------------

#: What a row written by hand may hold in any column instead of what jobpool writes.
ODD = st.sampled_from([None, True, -1, 0, 2**31, -(2**31) - 1, 1.5, -0.0, float("inf"),
                       float("-inf"), float("nan"), "", "text", "caf\u00e9", "bad\udcff",
                       b"", b"\xff", 3, 10**19])

#: R12: a chain as ``rows.step_dict`` writes its steps: both codecs answer a row that
#: carries one (the compiled one asks the codec's chain rule), and refuse it with a
#: second step spoilt.
SOUND_CHAIN = ('[{"name": "t.next", "payload": "[[1],{}]", "queue": "default", "priority": 0, '
               '"max_attempts": 3, "timeout": 30.0}]')

#: Each column of a claimed row (in ``row_codec``'s order): values jobpool writes, and
#: some at their bounds.
COLUMNS = (
    (1, 7, 2**62), ("t.job", "caf\u00e9.job"),
    (b"[[],{}]", "[[1],{}]", '{"s": "\u00e9"}', b"\x00\xff", memoryview(b"ab")),
    ("json", "pickle"), (1, 2, 9), (1, 3), (0, 2),
    (30.0, 5, 0.001), (None, 1_700_000_000.0, 1_700_000_000, float("inf")),
    (0, -5, 7, 2**31 - 1, -(2**31)), (1_700_000_000.5, 12),
    (0, 1, 3), (1_700_000_000.5, 99), (None, '[{"name": "x"}]', "[]", SOUND_CHAIN,
                                       SOUND_CHAIN[:-1] + ', {"name": "x"}]'),
    (None, 4, 2**62), (None, '{"k": "v"}', '{"k": "\u00e9"}', "[1]", "not json"))

#: Rows as jobpool writes them (most of them decode), the same with one column spoilt
#: (each refusal alone, in its own words), and rows odd anywhere.
WRITTEN = st.tuples(*(st.sampled_from(plain) for plain in COLUMNS))
CLAIM_ROWS = st.one_of(
    WRITTEN,
    st.builds(lambda row, column, value: row[:column] + (value,) + row[column + 1:],
              WRITTEN, st.integers(0, len(COLUMNS) - 1), ODD),
    st.tuples(*(st.one_of(st.sampled_from(plain), ODD) for plain in COLUMNS)))


@pytest.mark.c_extension
def test_the_compiled_codec_answers_as_the_codec_does(compiled_core):
    """Every row the C fast path answers, it answers as ``row_codec`` does, and every
    row the codec refuses, the compiled one refuses in the same words; the order (R7)
    and the types of what it returns are the codec's."""
    answered: collections.Counter = collections.Counter()

    @settings(max_examples=400, deadline=None)
    @given(rows=st.lists(CLAIM_ROWS, max_size=5), shift=st.sampled_from([0.0, -3.5]))
    def check(rows, shift):
        expected = row_codec.decode_claims(rows, "default", 5.0, shift)
        got = compiled_core.decode_claims(rows, "default", 5.0, shift)
        assert [typed(list(d.lease)) for d in got[0]] == [typed(list(d.lease)) for d in expected[0]]
        assert [typed(list(d.job)) for d in got[0]] == [typed(list(d.job)) for d in expected[0]]
        assert [(d.priority, d.line_at) for d in got[0]] == \
            [(d.priority, d.line_at) for d in expected[0]]
        assert got[1] == expected[1]
        answered.update(decoded=len(expected[0]), refused=len(expected[1]))
    check()
    # Both roads compared, not only refusals (rows odd in every column all refuse).
    assert answered["decoded"] >= 40 and answered["refused"] >= 40, answered


def _read_frame(reader, source):
    """What a success-frame reader answers (its repr, so a NaN of random bytes compares
    equal to itself), or the exception class and words it raises."""
    try:
        got = reader(source)
    except ValueError as exc:
        return ValueError, str(exc)
    return got if got is None or isinstance(got, bytes) else repr(typed(list(got)))


#: R68: success frames as children send them, their fields' bounds included, and bytes
#: around them: another message (marshal's), a zero tag of any size, a flag out of range.
FRAMES = st.one_of(
    st.builds(protocol.success_frame, st.integers(-(2**63), 2**63 - 1),
              st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**63 - 1),
              st.floats(allow_nan=False), st.booleans()),
    st.builds(protocol.outcome_message, st.integers(1, 2**40), st.integers(1, 9),
              st.integers(0, 8), st.none() | st.text(max_size=5), st.none(), st.none(),
              st.integers(0, 2**40), st.floats(0, 10), st.booleans(), st.integers(0, 2)),
    st.binary(max_size=40).map(lambda b: b"\0" + b),
    st.binary(max_size=40))


@pytest.fixture(scope="module")
def pipe():
    ends = channel.pair()
    yield ends
    for end in ends:
        end.close()


@pytest.mark.c_extension
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=FRAMES)
def test_the_compiled_message_reader_answers_as_the_pure_one(compiled_core, pipe, data):
    """R68: whatever a child writes on its pipe, the C reader answers as
    ``_core_py.read_message`` does: a frame's fields (types and order), another
    message's bytes, the same refusal in the same words."""
    ours, childs = pipe
    childs.send_bytes(data)
    got = _read_frame(compiled_core.read_message, ours)
    childs.send_bytes(data)
    assert got == _read_frame(_core_py.read_message, ours)
    if isinstance(got, str):  # a frame's fields: the general road's message has them
        childs.send_bytes(data)
        job_id, attempt, peak_rss, cpu_s, retiring = compiled_core.read_message(ours)
        assert protocol.decode(data) == (protocol.OUTCOME, job_id, attempt, P.DONE, None, None,
                                         None, peak_rss, cpu_s, retiring, 0)


@pytest.mark.c_extension
@pytest.mark.parametrize("reader", ["compiled", "pure"])
def test_a_message_that_stalls_or_cannot_be_is_refused_by_both_readers(
        compiled_core, reader, monkeypatch):
    """R65: on the supervisor's end (which does not block), a message whose bytes stop
    part-way is waited for ``MESSAGE_STALL`` seconds, then refused; a length past
    ``MAX_MESSAGE_BYTES`` is refused before anything is allocated; the same words from
    the C reader and the pure one. The child's own end still blocks."""
    read = compiled_core.read_message if reader == "compiled" else _core_py.read_message
    monkeypatch.setattr(bounds, "MESSAGE_STALL", 0.2)
    ours, childs = channel.pair()
    assert not os.get_blocking(ours.fileno()) and os.get_blocking(childs.fileno())
    os.write(childs.write_fileno(), (100).to_bytes(4, "big") + b"x" * 10)
    with pytest.raises(ValueError, match=r"^a message stalled: 10 of its 100 bytes "
                                                  r"came within 0\.2 s$"):
        read(ours)
    ours.close()
    ours, childs = channel.pair()
    os.write(childs.write_fileno(), b"\xff\xff\xff\xff" + (2**62).to_bytes(8, "big"))
    with pytest.raises(ValueError, match=f"^a message length of {2**62}$"):
        read(ours)
    ours.close()
    childs.close()


@pytest.mark.c_extension
def test_the_compiled_message_reader_reads_a_long_message_and_the_pipes_end(compiled_core):
    """multiprocessing's long prefix (over 2 GiB's is -1 and 8 bytes) is not sent here,
    so a message past the pipe's buffer stands for the many reads; then the end."""
    import threading
    ours, childs = channel.pair()
    big = protocol.dumps((protocol.PROGRESS, 1, 1, 50.0, "x" * 300_000))
    writer = threading.Thread(target=childs.send_bytes, args=(big,))
    writer.start()
    assert compiled_core.read_message(ours) == big
    writer.join()
    childs.close()
    with pytest.raises(EOFError):
        compiled_core.read_message(ours)
    ours.close()
