"""The PostgreSQL dialect: one queue shared by pools on many hosts (DESIGN section 7).

``store`` is the ``Store`` over a schema; ``statements`` every SQL statement it runs;
``connection`` the URL, the sessions and the schema's creation and upgrade;
``driver`` a supervisor's turn under the engine (``jobpool.engine``); ``retention``
and ``doctor``. psycopg is imported only when a ``postgresql://`` URL is opened.
Nothing here imports the SQLite dialect or the factory.
"""
