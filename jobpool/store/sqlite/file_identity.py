"""Which file a store path names, asked by path (R45).

A pool opened a file; an operator may later delete it (``rm store.db*``), move it, or
move another file over its name. The pool's connections go on working the file they
have open, while producers open whatever the path names now, so the two stop meeting.
The check is ``os.stat`` of the path against what it named when the store was
opened: never through a descriptor of ours, since opening and closing one would drop
SQLite's locks on the file (R42).
"""
from __future__ import annotations

import os
from typing import NamedTuple


class Identity(NamedTuple):
    device: int
    inode: int


def identity(path: str) -> Identity | None:
    """What ``path`` names now (None: nothing)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return Identity(st.st_dev, st.st_ino)


def change(path: str, opened: Identity | None) -> str | None:
    """How ``path`` no longer names the file opened as ``opened``, in words; None
    while it still does (or when nothing was recorded)."""
    if opened is None:
        return None
    now = identity(path)
    if now == opened:
        return None
    if now is None:
        return "nothing: the file was deleted or moved away"
    return f"another file (inode {now.inode}, the store opened was inode {opened.inode})"
