"""Example applications built on jobpool: ``imports`` (a CSV loader) and the ``demo`` that drives it."""
