#!/usr/bin/env bash
# One whole-process run of a W1 workload against the jobpool checkout TREE, for
# old-against-new pairs: time `run.sh WORKLOAD OLD_TREE` and `run.sh WORKLOAD NEW_TREE`
# alternately (hyperfine, or any timer that alternates) and compare the medians.
#
#   run.sh drain    TREE [pg [normal]]  20 000 no-op jobs (5 000 on PostgreSQL) by enqueue_many,
#                                       then `jobpool start --burst -q --procs 2`; all must be done
#   run.sh enqueue  TREE [pg]           1 000 single enqueue() calls
#
# BENCH_JOB_MS=M (and BENCH_JOB_SPIN=1) makes each drained job take M ms asleep (on the CPU);
# BENCH_LIMIT=N declares the job max_running=N (every turn a limited one, R35).
# BENCH_TEXT=1 gives each drained job an argument of text that is not ASCII ("Zoë N").
# BENCH_BATCH=1 enqueues the drained jobs as the members of one batch (R34), closed.
# BENCH_CHAIN=1 enqueues them as chains of three steps (R12): each step's success enqueues
# the next (a third of the rows at the start; 19 998 jobs on SQLite, 4 998 on PostgreSQL).
#
# START_ARGS (from the environment) go to `jobpool start` as extra flags, e.g.
# START_ARGS=--coalesce-us=500 to time a start option against its default.
# Each run uses a fresh SQLite file, or a fresh schema of $JOBPOOL_BENCH_PG (default the
# local server) dropped after; TREE's compiled core must be built.
set -euo pipefail
WORKLOAD=$1 TREE=$(cd "$2" && pwd) STORE=${3:-sqlite} DURABILITY=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-$HERE/../../.venv/bin/python}
export PYTHONPATH="$HERE:$TREE"
# `python -c` and `-m` put the current folder first on sys.path: run from one that
# holds no checkout, or the caller's tree would shadow TREE.
cd /
# The bytecode an ordinary install writes, for both trees alike: with
# PYTHONDONTWRITEBYTECODE set, a tree that was never compiled (a fresh `git archive`)
# compiles its modules again in every process, 6-8 % of a drain's time, while a checkout
# that compare.py once compiled does not (~50 ms here when already compiled).
"$PY" -m compileall -q "$TREE/jobpool" "$HERE" >/dev/null
if [ "$STORE" = pg ]; then
    SCHEMA=bench_$RANDOM$RANDOM
    DB="${JOBPOOL_BENCH_PG:-postgresql://postgres@127.0.0.1:5432/test}?schema=$SCHEMA${DURABILITY:+&durability=$DURABILITY}"
    N=5000
    cleanup() { "$PY" -c "import psycopg, sys; c = psycopg.connect(sys.argv[1], autocommit=True); c.execute('DROP SCHEMA IF EXISTS $SCHEMA CASCADE')" "${JOBPOOL_BENCH_PG:-postgresql://postgres@127.0.0.1:5432/test}"; }
else
    DIR=$(mktemp -d); DB=$DIR/jobpool.db; N=20000
    cleanup() { rm -rf "$DIR"; }
fi
trap cleanup EXIT
case "$WORKLOAD" in
drain)
    "$PY" -c "
import jobpool, noop_app, os
s = jobpool.connect('$DB')
args = [('Zoë %d' % i if os.environ.get('BENCH_TEXT') else i,) for i in range($N)]
if os.environ.get('BENCH_CHAIN'):
    for i in range($N // 3):
        s.enqueue_with('ab.noop', args=args[i], then=[noop_app.noop.s(*args[i]), noop_app.noop.s(*args[i])])
elif os.environ.get('BENCH_BATCH'):
    with s.batch() as batch:
        batch.add_many('ab.noop', args)
else:
    s.enqueue_many('ab.noop', args)
s.close()"
    # shellcheck disable=SC2086 # START_ARGS is a list of flags, split on purpose
    "$PY" -m jobpool start --app noop_app --db "$DB" --burst -q --procs 2 --no-dashboard ${START_ARGS:-} >/dev/null 2>&1
    WANT=$N; [ -n "${BENCH_CHAIN:-}" ] && WANT=$((N / 3 * 3))
    "$PY" -c "import jobpool, sys; done = jobpool.connect('$DB').stats()['done']; sys.exit(0 if done == $WANT else f'done: {done} of $WANT')" ;;
enqueue)
    "$PY" -c "
import jobpool, noop_app
s = jobpool.connect('$DB')
for i in range(1000):
    s.enqueue('ab.noop', i)
assert s.stats()['ready'] == 1000
s.close()" ;;
*) echo "run.sh: WORKLOAD is drain or enqueue, not $WORKLOAD" >&2; exit 2 ;;
esac
