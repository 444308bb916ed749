"""The SQLite dialect: one file, the default store (R26a, R42-R45).

``store`` is the ``Store`` over a file; ``statements`` every SQL statement it runs;
``driver`` (a turn's statements under the engine, ``jobpool.engine``, through the
``sqlite3`` module), ``migrations``, ``retention``, ``doctor``, ``checkpoint`` (the WAL checkpointer),
``file_identity`` (R45), ``wakeup`` (R11 on one host) and ``options`` (what opening a
store takes, named without loading it). The compiled driver stays ``jobpool/_core.pyx``.
Nothing here imports the PostgreSQL dialect or the factory.
"""
