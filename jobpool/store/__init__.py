"""Stores: where jobs live. SQLite (one file) is the default."""
