"""A model jobpool application: load CSV sales exports into a SQLite "warehouse".

One job per file, ``imports.load_csv(path, warehouse)``. Things worth copying:

- The payload is two paths, not the data: payloads stay small and the store stays
  fast. The warehouse is the application's own database, *not* the jobpool store:
  a child never opens the store, it only runs the job.
- All the CPU work (parsing, validating, converting) happens before the job takes
  the warehouse's write lock, so children parse in parallel and only the short
  writes are serialised.
- The job is idempotent per file and resumable (R37): it writes a file in chunks, one
  transaction each, and each chunk's transaction also records in the warehouse how
  many rows of the file are in; after a chunk it saves its state (the save point,
  where a graceful stop interrupts it). An attempt that finds a state of its own
  job goes on from the warehouse's count, so a chunk is never imported twice, even
  when the child was killed between a chunk's commit and its save; one without a
  state starts the file afresh, replacing what an earlier run of it wrote.
- A file that is malformed can never succeed, so ``SchemaError`` is listed as fatal:
  the job goes dead at once with the file and line in its reason. Anything else (a
  locked database, a full disk) is an ordinary exception and is retried with backoff.
- The files of one import are one batch (R34) whose ``on_complete`` callback,
  ``imports.summarize``, writes the import's summary once every file has ended,
  however its jobs ended and however many pools ran them: no one polls for "done".

Run it all with ``python -m jobpool.examples.demo``, or by hand::

    python -c "from jobpool.examples import imports; imports.generate('csv', files=10, rows=1000)"
    jobpool enqueue imports.load_csv --app jobpool.examples.imports \
        --args '["csv/sales-00000.csv", "warehouse.db"]'
    jobpool start --app jobpool.examples.imports --burst
"""
from __future__ import annotations

import array
import concurrent.futures
import csv
import json
import functools
import io
import os
import random
import sqlite3
import sys
import time
import zlib
from datetime import date, timedelta
from typing import Any, Callable, TypeVar

import jobpool
from jobpool import Retry, job

#: The columns of a sales export, in order; the first line of a file must be exactly this.
HEADER = ("order_id", "order_date", "region", "store", "sku", "quantity", "unit_price",
          "currency", "discount_pct", "customer_email")
#: Sales tax rate by region.
TAX_RATE = {"north": 0.20, "south": 0.18, "east": 0.21, "west": 0.19, "central": 0.17}
#: Exchange rates to US dollars.
USD_RATE = {"USD": 1.0, "EUR": 1.08, "GBP": 1.27, "JPY": 0.0067}
#: Orders outside this range are typing errors, not sales.
FIRST_DATE, LAST_DATE = date(2000, 1, 1), date(2099, 12, 31)
#: How long a job waits for another job's write lock on the warehouse, seconds. Writes are
#: short (the parsing is done before the lock is taken), so waiting is better than failing.
BUSY_TIMEOUT = 60.0
#: Report progress every this many rows (only where ``jobpool.progress`` exists).
PROGRESS_EVERY = 5000
#: Rows written per warehouse transaction: a stopped or killed import goes on after
#: the last chunk committed (R37).
CHUNK_ROWS = 5000

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS imports (
        id          INTEGER PRIMARY KEY,
        source      TEXT NOT NULL UNIQUE,    -- absolute path of the CSV file
        rows        INTEGER NOT NULL,
        imported_at REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sales (
        import_id       INTEGER NOT NULL REFERENCES imports (id),
        line            INTEGER NOT NULL,    -- line in the source file, for tracing back
        order_id        INTEGER NOT NULL,
        order_date      TEXT NOT NULL,
        year            INTEGER NOT NULL,
        quarter         INTEGER NOT NULL,
        month           INTEGER NOT NULL,
        iso_week        INTEGER NOT NULL,
        weekday         INTEGER NOT NULL,    -- 1 = Monday
        region          TEXT NOT NULL,
        store           TEXT NOT NULL,
        sku             TEXT NOT NULL,
        quantity        INTEGER NOT NULL,
        unit_price      REAL NOT NULL,
        currency        TEXT NOT NULL,
        discount_pct    REAL NOT NULL,
        gross           REAL NOT NULL,       -- quantity * unit_price, in the file's currency
        net             REAL NOT NULL,       -- after discount
        tax             REAL NOT NULL,
        total_usd       REAL NOT NULL,       -- (net + tax) in US dollars
        price_band      TEXT NOT NULL,       -- low / mid / high, by total_usd
        customer_domain TEXT NOT NULL,
        customer_key    INTEGER NOT NULL     -- stable pseudonym of the e-mail address
    )""",
    # The idempotent re-import deletes by import_id; without this it would scan the table.
    "CREATE INDEX IF NOT EXISTS sales_by_import ON sales (import_id)",
)

#: The ``sales`` columns in the order ``write_chunk`` supplies them.
SALES_COLUMNS = ("import_id", "line", "order_id", "order_date", "year", "quarter", "month",
                 "iso_week", "weekday", "region", "store", "sku", "quantity", "unit_price",
                 "currency", "discount_pct", "gross", "net", "tax", "total_usd", "price_band",
                 "customer_domain", "customer_key")
INSERT_SALE = (f"INSERT INTO sales ({', '.join(SALES_COLUMNS)}) "
               f"VALUES ({', '.join('?' for _ in SALES_COLUMNS)})")


class SchemaError(ValueError):
    """The file is not a valid sales export. Retrying cannot fix it, so it is fatal."""


class RowError(SchemaError):
    """One row has a missing, unparsable or out-of-range value."""


# -- the job ----------------------------------------------------------------------------------

@job(name="imports.load_csv", timeout=300, max_attempts=3, fatal=(SchemaError,))
def load_csv(path: str, warehouse: str) -> int:
    """Import one CSV export into the warehouse's ``sales`` table; returns the row count."""
    rows = read_sales(path)  # all the CPU work, before any lock is taken
    source = os.path.abspath(path)
    conn = open_warehouse(warehouse)
    try:
        # A state of this job's own says an import of this file is under way: the
        # warehouse, which commits each chunk with its count, says how far it got.
        resuming = jobpool.resume_state() is not None
        done = rows_imported(conn, source, len(rows)) if resuming else None
        if done is None:
            done = start_import(conn, source)
        for start in range(done, len(rows), CHUNK_ROWS):
            end = min(start + CHUNK_ROWS, len(rows))
            write_chunk(conn, source, rows, start, end)
            report_progress(90.0 + 10.0 * end / len(rows), "writing")
            checkpoint(end)
    finally:
        conn.close()
    return len(rows)


def checkpoint(rows_done: int) -> None:
    """The save point (R37), after a chunk: a graceful stop interrupts the import here
    (``jobpool.Interrupted``), and its next attempt goes on from the warehouse."""
    jobpool.save_state({"rows": rows_done})


@job(name="imports.summarize", max_attempts=3)
def summarize(warehouse: str, summary_path: str, batch: dict) -> dict:
    """The import batch's ``on_complete`` callback (R34): the summary of the whole
    import, written as JSON to ``summary_path`` (replaced whole, never half-written).
    ``batch`` is what the store says of the batch: its counts and dead members."""
    summary = {"files": batch["total"], "imported": batch["done"], "failed": batch["dead"],
               "failed_jobs": batch["dead_ids"], "rows": count_rows(warehouse)}
    partial = summary_path + ".partial"
    with open(partial, "w", encoding="utf-8") as fh:
        json.dump(summary, fh)
    os.replace(partial, summary_path)
    return summary


def report_progress(percent: float, stage: str) -> None:
    """Tell the supervisor how far we are, on jobpool versions that support it (R22)."""
    progress = getattr(jobpool, "progress", None)
    if progress is not None:
        progress(percent, stage)


# -- parsing and validating -------------------------------------------------------------------

def read_sales(path: str) -> list[tuple]:
    """Parse and convert every row of a file: ``[(line, *converted_fields), ...]``.

    Raises ``SchemaError`` (naming the file and line) for anything malformed.
    """
    name = os.path.basename(path)
    with open(path, newline="", encoding="utf-8") as fh:
        # Read it whole: an export is a few MB, and knowing the line count up front
        # turns progress into a fraction.
        try:
            text = fh.read()
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{name} is not UTF-8 text: {exc}") from None
    total_lines = text.count("\n") + 1
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = []
    try:
        header = next(reader, None)
        if header is None:
            raise SchemaError(f"{name} is empty (no header line)")
        if tuple(header) != HEADER:
            raise SchemaError(f"{name}: header is {','.join(header)!r}, "
                              f"expected {','.join(HEADER)!r}")
        report_progress(0.0, "parsing")
        for fields in reader:
            line = reader.line_num
            try:
                rows.append((line, *convert_row(fields)))
            except ValueError as exc:  # our RowErrors, and anything else a bad value provokes
                raise RowError(f"{name} line {line}: {exc}") from None
            if line % PROGRESS_EVERY == 0:
                report_progress(90.0 * line / total_lines, "parsing")
    except csv.Error as exc:  # e.g. a NUL byte, or an unterminated quote at the end
        raise RowError(f"{name} line {reader.line_num}: {exc}") from None
    return rows


def convert_row(fields: list[str]) -> tuple:
    """Validate one row and compute its derived fields, in ``sales`` column order
    (after ``import_id`` and ``line``). Raises ``ValueError`` (or a subclass) if invalid.
    """
    if len(fields) != len(HEADER):
        raise RowError(f"expected {len(HEADER)} fields, found {len(fields)}")
    order_id, order_date, region, store, sku, quantity, unit_price, currency, discount_pct, email = fields

    order_number = _parse(int, order_id, "order_id")
    if order_number <= 0:
        raise RowError(f"order_id must be positive, not {order_number}")
    day = _parse(date.fromisoformat, order_date, "order_date")
    if not FIRST_DATE <= day <= LAST_DATE:
        raise RowError(f"order_date {order_date} is outside {FIRST_DATE}..{LAST_DATE}")
    tax_rate = TAX_RATE.get(region)
    if tax_rate is None:
        raise RowError(f"unknown region {region!r}")
    if not (store[:1] == "S" and store[1:].isdigit()):
        raise RowError(f"store must look like S123, not {store!r}")
    if not (sku[:4] == "SKU-" and sku[4:].isdigit()):
        raise RowError(f"sku must look like SKU-01234, not {sku!r}")
    count = _parse(int, quantity, "quantity")
    if not 1 <= count <= 10_000:
        raise RowError(f"quantity {count} is outside 1..10000")
    price = _parse(float, unit_price, "unit_price")
    if not 0.0 <= price < 1_000_000.0:  # also rejects nan
        raise RowError(f"unit_price {unit_price} is outside 0..1000000")
    usd_rate = USD_RATE.get(currency)
    if usd_rate is None:
        raise RowError(f"unknown currency {currency!r}")
    discount = _parse(float, discount_pct, "discount_pct")
    if not 0.0 <= discount <= 90.0:
        raise RowError(f"discount_pct {discount_pct} is outside 0..90")
    local, at, domain = email.strip().lower().partition("@")
    if not local or not at or "." not in domain:
        raise RowError(f"customer_email {email!r} is not an e-mail address")

    gross = round(count * price, 2)
    net = round(gross * (1.0 - discount / 100.0), 2)
    tax = round(net * tax_rate, 2)
    total_usd = round((net + tax) * usd_rate, 2)
    band = "low" if total_usd < 100.0 else "mid" if total_usd < 1000.0 else "high"
    _, iso_week, weekday = day.isocalendar()
    customer_key = zlib.crc32(f"{local}@{domain}".encode())
    return (order_number, order_date, day.year, (day.month - 1) // 3 + 1, day.month, iso_week,
            weekday, region, store, sku, count, price, currency, discount, gross, net, tax,
            total_usd, band, domain, customer_key)


T = TypeVar("T")


def _parse(convert: Callable[[str], T], text: str, column: str) -> T:
    """``convert(text)``, or a ``RowError`` that names the column and the bad value."""
    try:
        return convert(text)
    except ValueError as exc:
        raise RowError(f"{column} {text!r} is invalid: {exc}") from None


# -- the warehouse ----------------------------------------------------------------------------

def open_warehouse(path: str) -> sqlite3.Connection:
    """Open (creating if needed) the warehouse: WAL, a long busy timeout, the schema."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    try:
        # WAL lets readers (reports, the demo's row count) run while a job writes.
        conn.execute("PRAGMA journal_mode=WAL")
        for statement in SCHEMA:
            conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


def prepare_warehouse(path: str) -> None:
    """Create the warehouse before the workers start, so they do not race to do it."""
    open_warehouse(path).close()


def start_import(conn: sqlite3.Connection, source: str) -> int:
    """A fresh import of ``source``: what an earlier run of it wrote is removed, and its
    count of rows in starts at 0 (returned)."""
    def start(import_id: int | None) -> None:
        if import_id is None:
            conn.execute("INSERT INTO imports (source, rows, imported_at) VALUES (?, 0, ?)",
                         (source, time.time()))
        else:
            conn.execute("DELETE FROM sales WHERE import_id = ?", (import_id,))
            conn.execute("UPDATE imports SET rows = 0, imported_at = ? WHERE id = ?",
                         (time.time(), import_id))
    _write(conn, lambda: start(_import_id(conn, source)))
    return 0


def write_chunk(conn: sqlite3.Connection, source: str, rows: list[tuple], start: int,
                end: int) -> None:
    """Rows ``start:end`` of the file and its new count, in one transaction; only if
    the warehouse still counts ``start`` rows of it. Otherwise another run of the same
    file moved on meanwhile (an attempt whose lease was taken back, a second job for
    the file): this one writes nothing and is retried, to go on from the count."""
    def write() -> None:
        import_id = _import_id(conn, source)
        moved = conn.execute("UPDATE imports SET rows = ?, imported_at = ? WHERE id = ? AND rows = ?",
                             (end, time.time(), import_id, start)).rowcount
        if not moved:
            raise Retry(f"another run of {source} moved on: going on from the warehouse",
                        after=0.1)
        conn.executemany(INSERT_SALE, [(import_id, *row) for row in rows[start:end]])
    _write(conn, write)


def rows_imported(conn: sqlite3.Connection, source: str, total: int) -> int | None:
    """How many rows of ``source`` the warehouse holds, or None if it cannot be trusted
    to go on from (no import of it, or more rows than the file has now)."""
    found = conn.execute("SELECT rows FROM imports WHERE source = ?", (source,)).fetchone()
    if found is None or found[0] > total:
        return None
    return found[0]


def _import_id(conn: sqlite3.Connection, source: str) -> int | None:
    found = conn.execute("SELECT id FROM imports WHERE source = ?", (source,)).fetchone()
    return None if found is None else found[0]


def _write(conn: sqlite3.Connection, body: Callable[[], None]) -> None:
    """``body`` in one write transaction of the warehouse."""
    # BEGIN IMMEDIATE takes the write lock now (waiting up to BUSY_TIMEOUT), instead of
    # failing half-way with "database is locked" when a read would upgrade to a write.
    conn.execute("BEGIN IMMEDIATE")
    try:
        body()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def count_rows(path: str) -> int:
    """Rows in the warehouse's ``sales`` table (0 if it has none yet)."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT)
    try:
        return conn.execute("SELECT count(*) FROM sales").fetchone()[0]
    except sqlite3.OperationalError:  # no such table
        return 0
    finally:
        conn.close()


# -- test data ----------------------------------------------------------------------------------

def _pool(values: list[str], size: int) -> list[str]:
    """``values`` repeated to exactly ``size`` entries, so a random byte (or pair) indexes it."""
    return [values[n % len(values)] for n in range(size)]


@functools.cache
def _pools() -> dict[str, list[str]]:
    """Pre-formatted column values, 256 or 65536 of each, to sample from."""
    first = date(2022, 1, 1)
    domains = ["example.com", "mail.example.org", "shop.example.net", "corp.example"]
    return {
        "date": _pool([(first + timedelta(days=n)).isoformat() for n in range(730)], 65536),
        "region": _pool(list(TAX_RATE), 256),
        "store": _pool([f"S{n:03d}" for n in range(1, 121)], 256),
        "sku": _pool([f"SKU-{n:05d}" for n in range(1, 2001)], 65536),
        "quantity": _pool([str(n) for n in range(1, 25)], 256),
        "price": [f"{1 + n * 0.0137:.2f}" for n in range(65536)],
        "currency": _pool(["USD"] * 6 + ["EUR"] * 3 + ["GBP", "JPY"], 256),
        "discount": _pool(["0"] * 5 + ["5", "10", "12.5", "15", "20", "30"], 256),
        "email": _pool([f"customer{n}@{domains[n % len(domains)]}" for n in range(20_000)], 65536),
    }


def _sample(rng: random.Random, pool: list[str], k: int) -> list[str]:
    """``k`` random entries of a 256- or 65536-entry pool.

    One random byte (or byte pair) per entry, looked up with ``map``: all C loops, about
    ten times faster than ``rng.choices``, which matters for millions of rows.
    """
    if len(pool) == 256:
        indexes: bytes | array.array = rng.randbytes(k)
    else:
        indexes = array.array("H", rng.randbytes(2 * k))
        if sys.byteorder == "big":
            indexes.byteswap()  # same seed, same files, on any machine
    return list(map(pool.__getitem__, indexes))


#: What a malformed row looks like in a ``bad`` file: each breaks a different rule.
_MALFORMED = ("{id},2023-02-30,north,S001,SKU-00001,1,9.99,USD,0,a@example.com",  # no such day
              "{id},2023-03-01,north,S001,SKU-00001,twelve,9.99,USD,0,a@example.com",
              "{id},2023-03-01,atlantis,S001,SKU-00001,1,9.99,USD,0,a@example.com",
              "{id},2023-03-01,north,S001,SKU-00001,1,9.99,USD")  # a truncated line


def generate(directory: str, files: int = 200, rows: int = 20_000, seed: int = 0, *,
             bad: int = 0, workers: int = 1) -> list[str]:
    """Write ``files`` deterministic CSV exports of ``rows`` rows each; returns their paths.

    ``bad`` of them (chosen by ``seed``) get one malformed row, so their import is
    rejected as a whole and the job goes dead. Same arguments, same bytes, whatever
    the number of ``workers`` (processes) writing them.
    """
    if files < 0 or rows < 1 or not 0 <= bad <= files or workers < 1:
        raise ValueError("need files >= 0, rows >= 1, 0 <= bad <= files and workers >= 1")
    os.makedirs(directory, exist_ok=True)
    malformed = set(random.Random(seed).sample(range(files), bad))
    tasks = [(os.path.join(directory, f"sales-{index:05d}.csv"), index, rows, seed,
              index in malformed) for index in range(files)]
    if workers == 1 or files < 2:
        for task in tasks:
            _write_export(*task)
    else:
        with concurrent.futures.ProcessPoolExecutor(min(workers, files)) as executor:
            for future in [executor.submit(_write_export, *task) for task in tasks]:
                future.result()  # re-raises a worker's error here
    return [task[0] for task in tasks]


def _write_export(path: str, index: int, rows: int, seed: int, malformed: bool) -> None:
    rng = random.Random(seed * 1_000_003 + index)
    pools = _pools()
    first_id = index * rows + 1
    columns: list[Any] = [map(str, range(first_id, first_id + rows))]
    columns += [_sample(rng, pools[name], rows) for name in
                ("date", "region", "store", "sku", "quantity", "price", "currency", "discount",
                 "email")]
    lines = [",".join(HEADER)]
    lines.extend(map(",".join, zip(*columns)))
    if malformed:
        line = rng.randrange(1, rows + 1)
        lines[line] = rng.choice(_MALFORMED).format(id=first_id + line - 1)
    lines.append("")
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("\n".join(lines))
