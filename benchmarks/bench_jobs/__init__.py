"""The same job bodies for every system under test, and one completion counter.

``common`` has the bodies and imports nothing but the standard library, so it
runs unchanged in jobpool's venv and in the peers' venv. Each ``<system>_jobs``
module registers ``noop(i)``, ``cpu(ms)`` and ``stamp(t_enqueued)`` the way that
system wants and calls the bodies here.
"""
