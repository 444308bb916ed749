"""Text from jobs and rows, made safe to show an operator (R46).

An error message, a progress stage, a job or queue name is whatever a job (or anyone
who can write the store) put there. Printed as it is it could be taken for rich's
markup (``[/var/data/in]`` crashed the listings with a ``MarkupError``; ``[link=…]``
would be obeyed) or reach the terminal as escape sequences (a window title, a
clipboard write, a cleared screen). So everything shown goes through ``shown``,
which makes control characters visible (``\\x1b``), and every console jobpool prints
through is made by ``console``: markup is off unless a call asks for it, and every
string it renders is passed through ``shown`` first. JSON output keeps the exact text.
"""
from __future__ import annotations

import os

import re
from typing import Any

#: C0 controls but tab and newline, DEL, C1 controls, the bidirectional overrides
#: that reorder what a terminal shows, and lone surrogates (a row's bytes that are
#: not UTF-8, as a reader keeps them, R44: no terminal can be sent them).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shown(text: Any) -> str:
    """``text`` with every control character written out visibly (``\\x1b``)."""
    value = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escaped, value) if _UNSAFE.search(value) else value


def shown_line(text: Any) -> str:
    """The first line of ``text``, shown (a list's cell)."""
    return shown(str(text).split("\n", 1)[0])


_console_class: Any = None


def console(**options: Any) -> Any:
    """A rich ``Console`` that prints text as text: markup off unless a call asks
    (``markup=True``, for jobpool's own format strings, which escape what they embed),
    and every string it renders shown (``shown``) first, table cells included."""
    global _console_class
    if _console_class is None:
        from rich.console import Console

        class SafeConsole(Console):
            def render_str(self, text: str, **kwargs: Any) -> Any:  # type: ignore[override]
                return super().render_str(shown(text), **kwargs)

        _console_class = SafeConsole
    options.setdefault("markup", False)
    for variable, size in (("COLUMNS", "width"), ("LINES", "height")):
        text = os.environ.get(variable, "")
        if size not in options and text.isdigit() and int(text) > MOST_CELLS:
            # rich takes any number it is given: COLUMNS=10**21 overflowed its padding.
            options[size] = MOST_CELLS
        elif size not in options and text.isdigit() and int(text) == 0:
            # ... and COLUMNS=0 printed nothing at all (an enqueue's new id lost): a
            # size of nothing is no size; rich's own default stands.
            options[size] = FALLBACK_CELLS[size]
    return _console_class(**options)


def to_nowhere(stream: Any) -> None:
    """Point ``stream``'s descriptor at /dev/null: once writing to it has failed (a reader
    gone, a full disk), what is left in its buffer would fail again at exit."""
    try:
        sink = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(sink, stream.fileno())
        finally:
            os.close(sink)
    except (OSError, ValueError, AttributeError):
        pass


#: The widest (and tallest) a terminal is taken to be, whatever ``COLUMNS`` says.
MOST_CELLS = 10_000
#: What ``COLUMNS=0`` or ``LINES=0`` is taken for: rich's own size when it knows none.
FALLBACK_CELLS = {"width": 80, "height": 25}


def counted(count: int, one: str, many: str | None = None) -> str:
    """``1 job``, ``2 jobs``, ``1 process``: a count as a line says it (``many``
    where adding an s is not the plural)."""
    return f"{whole_text(count)} {one if count == 1 else many or one + 's'}"


def whole_text(value: Any) -> str:
    """A count as a line says it; ``?`` for one a row holds as no whole number (R44: a
    row written by hand), where ``None`` or text would be printed."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "?"


def markup_escape(text: Any) -> str:
    """``text`` shown, with rich's markup characters escaped, to embed in markup."""
    from rich.markup import escape
    return escape(shown(text))


def meta_text(meta: Any) -> str:
    """R54, R67: a job's metadata on one line as ``key=value`` pairs, the form ``jobs list
    --meta KEY=VALUE`` reads back: a text value as it is unless it would read back as
    something else (``"7"``, ``"true"``, one with a space or an ``=``), then as JSON, and
    any other value as compact JSON. Not yet shown (``shown`` makes it so); "" for none."""
    if not isinstance(meta, dict):
        return ""
    import json
    pairs = []
    for key, value in meta.items():
        text = value if isinstance(value, str) and _reads_back(value) else \
            json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        pairs.append(f"{key}={text}")
    return " ".join(pairs)


def _reads_back(text: str) -> bool:
    """Whether ``--meta key=TEXT`` would read TEXT as this same string, and a space
    or ``=`` in it would not blur where a pair ends."""
    from jobpool import serialize
    if not text or any(c.isspace() or c == "=" for c in text):
        return False
    try:
        serialize.loads(text)
    except (ValueError, RecursionError):  # R44: a row's text nested deep is text too
        return True
    return False
