"""Stores: where jobs live. SQLite (one file) is the default.

``Store`` (and the supervisor's ``Claimer``) is the protocol every store implements;
see ``jobpool/store/base.py`` for each method's contract.
"""
from jobpool.store.base import Claimer, Store

__all__ = ["Store", "Claimer"]
