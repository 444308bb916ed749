"""pytest setup for benchmarks/ only (never collected by the default ``pytest`` run,
whose testpaths are ["tests"]).

    .venv/bin/python -m pytest benchmarks/test_core_bench.py --benchmark-only

The summary at the end prints the compiled/pure ratio and the backlog ratio.
"""
from __future__ import annotations


def pytest_configure(config):
    # pyproject's addopts has --strict-markers: register ours here, not there.
    config.addinivalue_line("markers", "bench: microbenchmark in benchmarks/, run on demand")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    results = getattr(config, "core_bench_results", None)
    if not results:
        return
    tr = terminalreporter
    tr.section("core claim(1)+settle(DONE) cycle")
    backlogs = sorted({b for _impl, b in results})
    for backlog in backlogs:
        for impl in ("pure", "compiled"):
            median = results.get((impl, backlog))
            if median:
                tr.write_line(f"{impl:9} backlog {backlog:>9,}: median {median * 1e6:8.1f} µs/cycle "
                              f"= {1 / median:9,.0f} cycles/s")
    for backlog in backlogs:
        pure, compiled = results.get(("pure", backlog)), results.get(("compiled", backlog))
        if pure and compiled:
            tr.write_line(f"compiled/pure speed ratio at backlog {backlog:,}: {pure / compiled:.2f}×")
    if len(backlogs) > 1:
        small, big = backlogs[0], backlogs[-1]
        for impl in ("pure", "compiled"):
            a, b = results.get((impl, small)), results.get((impl, big))
            if a and b:
                tr.write_line(f"{impl}: claim rate at {big:,} rows ÷ rate at {small:,} rows = "
                              f"{a / b:.3f} (target ≥ 0.90)")
