"""R68: the supervisor's pump against its general loop, on the no-op drain.

    .venv/bin/python benchmarks/pump.py [--jobs 20000] [--procs 2] [--repeat 5] [--pump-only]
                                        [--start-args="--coalesce-us=1000"]

Runs ``sqlite_floors.jobpool_drain`` (``jobpool start --burst -q`` over no-op jobs on a
fresh store, in a forked process, start-up not timed) alternately with the pump on
and with ``--no-pump``, and prints for each the jobs/s and the supervisor's own CPU
per job (``RUSAGE_SELF``, its children's apart), median, min and max, then the
ratios of the medians. Both runs use the same tree: what differs is only the loop.

``--pump-only`` runs the pump alone: with ``PYTHONPATH=TREE`` it measures the jobpool of
another checkout (the first line says which), so two trees are compared by running
it alternately over each (an old tree against a new one's compiled turn, R68).
``--start-args`` adds flags to every ``jobpool start`` (split on spaces), to time a start
option: run it once with the option and once without, alternately.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sqlite_floors import jobpool_drain  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pump-only", action="store_true",
                        help="run the pump alone (to compare two trees, see above)")
    parser.add_argument("--start-args", default="",
                        help="more flags for every jobpool start, e.g. --coalesce-us=1000")
    args = parser.parse_args()
    extra = args.start_args.split()
    import jobpool
    print(f"jobpool from {os.path.dirname(os.path.dirname(jobpool.__file__))}")
    runs: dict[str, list[dict[str, float]]] = {"pump": []}
    if not args.pump_only:
        runs["general loop"] = []
    for _ in range(args.repeat):
        runs["pump"].append(jobpool_drain(args.jobs, args.procs, *extra))
        if not args.pump_only:
            runs["general loop"].append(jobpool_drain(args.jobs, args.procs, "--no-pump", *extra))
    medians = {}
    print(f"{args.jobs} no-op jobs, --procs {args.procs} {' '.join(extra)}, "
          f"{args.repeat} alternating runs each")
    for loop, results in runs.items():
        for figure in ("jobs_per_s", "supervisor_cpu_us", "children_cpu_us"):
            values = [r[figure] for r in results]
            medians[loop, figure] = statistics.median(values)
            print(f"{loop:<13} {figure:<18} median {statistics.median(values):>8.1f}  "
                  f"min {min(values):>8.1f}  max {max(values):>8.1f}")
    for figure in ("jobs_per_s", "supervisor_cpu_us") if not args.pump_only else ():
        print(f"pump / general loop, {figure}: "
              f"{medians['pump', figure] / medians['general loop', figure]:.3f}")


if __name__ == "__main__":
    main()
