"""The store's own gauges, once per fleet: ``jobpool metrics`` (print them once) and
``jobpool metrics --serve ADDR`` (a small exporter).

Queue depths belong to the store, not to any pool: N pools exporting them would
give N copies (and a sum over pools N times the truth), and a count in the
supervisor's loop would cost every turn. So one process reads them, at most once
per ``every`` seconds however often it is scraped, from the store's indexes
(``Store.queue_metrics``), and serves them with the same selector-driven server
as a pool's ``--metrics`` (``metrics.MetricsServer``).
"""
from __future__ import annotations

import selectors
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from jobpool import metrics
from jobpool.errors import JobpoolError, StoreError
from jobpool.snapshot import queue_views
from jobpool.store.base import Store
from jobpool.store.records import QueueMetrics

#: The statuses ``jobpool_queue_jobs`` reports for every queue (0 when none).
STATUSES = ("ready", "scheduled", "running", "dead")
#: The least time between two reads of the store, seconds.
MIN_EVERY = 15.0


class _QueueGauges(Collector):
    """Turns the last ``QueueMetrics`` read into gauge families."""

    def __init__(self) -> None:
        self.read: QueueMetrics | None = None
        #: Whether the last read of the store worked.
        self.store_answers = True

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("jobpool_queue_jobs", "Jobs in the store by queue and status",
                                 labels=("queue", "status"))
        oldest = GaugeMetricFamily("jobpool_queue_oldest_ready_seconds",
                                   "How long the oldest due ready job of a queue has waited",
                                   labels=("queue",))
        paused = GaugeMetricFamily("jobpool_queue_paused", "1 while no pool claims from a queue",
                                   labels=("queue",))
        up = GaugeMetricFamily("jobpool_store_up", "1 if the last read of the store worked "
                               "(0: the values shown are from the last read that did)",
                               value=1 if self.store_answers else 0)
        read = self.read
        if read is not None:
            # The dashboard's reading of the same counts (ready split from scheduled).
            views = queue_views(read.counts, {}, (), most=None)  # exact counts
            due = dict(read.oldest_due)
            for view in views:
                for status in STATUSES:
                    jobs.add_metric((view.queue, status), getattr(view, status))
                since = due.get(view.queue)
                oldest.add_metric((view.queue,),
                                  max(0.0, read.now - since) if since is not None else 0.0)
            for queue in sorted({v.queue for v in views} | set(read.paused)):
                paused.add_metric((queue,), 1 if queue in read.paused else 0)
        yield jobs
        yield oldest
        yield paused
        yield up


class StoreGauges:
    """The store's gauges, read at most once per ``every`` seconds."""

    def __init__(self, store: Store, *, every: float = MIN_EVERY,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if every < MIN_EVERY:
            raise JobpoolError(f"--every must be at least {MIN_EVERY:g} seconds, not {every:g}")
        self.store = store
        self.every = every
        self.clock = clock
        self.monotonic = monotonic
        self.registry = CollectorRegistry(auto_describe=False)
        self._gauges = _QueueGauges()
        self.registry.register(self._gauges)
        self._read_at = -float("inf")

    def refresh(self) -> None:
        """Read the store now; StoreError if it does not answer."""
        self._read_at = self.monotonic()
        try:
            self._gauges.read = self.store.queue_metrics(self.clock())
        except StoreError:
            self._gauges.store_answers = False
            raise
        self._gauges.store_answers = True

    @property
    def store_answers(self) -> bool:
        """Whether the last read of the store worked (``/healthz``, ``jobpool_store_up``)."""
        return self._gauges.store_answers

    def exposition(self) -> bytes:
        """A scrape: the gauges, read afresh only when the last read is ``every`` old
        (a store that fails keeps its last values; ``/healthz`` says so)."""
        if self.monotonic() - self._read_at >= self.every:
            try:
                self.refresh()
            except StoreError:
                pass
        return generate_latest(self.registry)


def serve(gauges: StoreGauges, address: str, announce: Callable[[str], None]) -> None:
    """Serve ``/metrics`` and ``/healthz`` until interrupted (one thread, no fork)."""
    listener = metrics.bind(metrics.parse_address(address), address)
    selector = selectors.DefaultSelector()
    server = metrics.MetricsServer(listener, selector, gauges.exposition,
                                   lambda: gauges.store_answers)
    announce(f"serving the store's metrics on http://{server.address}/metrics")
    try:
        while True:
            server.serve_once(1.0)
    finally:
        server.close()
        selector.close()
