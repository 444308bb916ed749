"""Payload and result encoding.

JSON is the default (R2): a store that anyone can write must not be able to run
code in every worker, which unpickling would allow. Pickle (dill, as shipped with
``multiprocess``) is opt-in per job with ``@job(serializer="pickle")``.
"""
from __future__ import annotations

import json
import re
import sys
from typing import Any, Callable

from jobpool import bounds
from jobpool.errors import EnqueueError

SERIALIZERS = ("json", "pickle")
#: R39: how much a decoder can do, least first. JSON builds plain data; unpickling
#: runs whatever code the bytes name.
_POWER = {"json": 0, "pickle": 1}

#: R1, R41: ceiling on an encoded payload, and on a stored result, in bytes.
MAX_PAYLOAD_BYTES = 1024 * 1024

#: The encoder of what jobs and operators give (``to_json``): a single enqueue and the
#: store's batch path write the same text with it.
_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
#: ``json.loads``'s own decoder, for text already known to be UTF-8 (``decode_payload``).
_decode_text = json.JSONDecoder().decode


#: Past this nesting, JSON read back from a store is refused as nested too deeply
#: (``RecursionError``, what the decoder raises under Python's default recursion
#: limit). A process whose recursion limit was raised far (an app that recurses deep,
#: or a job that raised it) let the C decoder run off its C stack on a deep row: a
#: segfault in the pool or the caller, where a row can only earn an error (R44).
JSON_MOST_DEPTH = 10_000
#: A JSON string (one left open runs to the end: matched once, not again from each of
#: its quotes, which took the scan quadratic time on malformed text) or a bracket.
_NESTING = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\Z)|[\[\]{}]', re.S)


def check_depth(data: str | bytes | bytearray | memoryview) -> None:
    """Refuse JSON ``data`` nested past ``JSON_MOST_DEPTH`` when the decoder's own
    bound would not (the recursion limit is above it). Costs a call to
    ``sys.getrecursionlimit`` unless the limit was raised and the text is long."""
    if sys.getrecursionlimit() <= JSON_MOST_DEPTH or len(data) <= JSON_MOST_DEPTH:
        return
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        if raw.count(b"[") + raw.count(b"{") <= JSON_MOST_DEPTH:
            return
        text = raw.decode("utf-8", "replace")
    else:
        text = data
        if text.count("[") + text.count("{") <= JSON_MOST_DEPTH:
            return
    depth = 0
    for token in _NESTING.finditer(text):
        mark = token.group()
        if mark in "[{":
            depth += 1
            if depth > JSON_MOST_DEPTH:
                raise RecursionError(f"JSON nested more than {JSON_MOST_DEPTH} deep")
        elif mark in "]}":
            depth -= 1


def check_object_depth(value: Any) -> None:
    """Refuse a value JSON would write nested past ``JSON_MOST_DEPTH`` when the
    encoder's own bound would not (the recursion limit is above it): the C encoder
    runs off its C stack as the decoder does (``check_depth``). A walk of the value's
    lists, tuples and dicts, only in a process that raised its recursion limit; a
    container met again on its own path is left to the encoder, which names the cycle."""
    if sys.getrecursionlimit() <= JSON_MOST_DEPTH:
        return
    path: list[tuple[int, Any]] = [(0, iter((value,)))]
    on_path: set[int] = set()
    while path:
        for item in path[-1][1]:
            if isinstance(item, dict):
                children: Any = iter(item.values())
            elif isinstance(item, (list, tuple)):
                children = iter(item)
            else:
                continue
            if id(item) in on_path:
                continue
            if len(path) > JSON_MOST_DEPTH:
                raise RecursionError(f"nested more than {JSON_MOST_DEPTH} deep")
            on_path.add(id(item))
            path.append((id(item), children))
            break
        else:
            on_path.discard(path.pop()[0])


def loads(data: str | bytes | bytearray, **options: Any) -> Any:
    """``json.loads`` of text read from a store, its depth checked (``check_depth``)."""
    check_depth(data)
    return json.loads(data, **options)


#: A key JSON wrote from a number, ``True``, ``False`` or ``None`` (``{"1":``): only a
#: text holding one can hold a pair of keys that clash, so only that one is walked. A
#: quote inside a JSON string is escaped, so ``{"`` and ``,"`` start keys alone.
_CONVERTED_KEY = re.compile(r'[{,]"(?:-?\d[\d.eE+-]*|true|false|null|-?Infinity|NaN)":')


def may_clash(text: str) -> bool:
    """Whether JSON ``text`` holds a key written from something other than text: the
    one case where ``json_key_clash`` can find a pair (a search at C speed, where the
    walk is Python's). Text without a ``{`` holds no object, so no key: a bulk enqueue's
    argument lists are passed over at ``memchr``'s speed, not the pattern's."""
    return "{" in text and _CONVERTED_KEY.search(text) is not None


def json_key_clash(value: Any) -> str | None:
    """R1: what is wrong when a dict in ``value`` has two keys JSON writes as one
    (``{1: "a", "1": "b"}`` is written ``{"1":"a","1":"b"}``, which no reader takes
    back as it was: a decoder keeps one of the two, and jobpool's own row checks refuse
    the text, R44); None when none has. Only a dict with a key that is not text can
    have such a pair: JSON writes a number, ``True``, ``False`` or ``None`` as text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not all(type(key) is str for key in item):
                written: dict[str, Any] = {}
                for key in item:
                    text = _json_key(key)
                    if text in written:
                        return (f"the keys {written[text]!r} and {key!r} of one dict are both "
                                f"written as the JSON key {text!r}")
                    written[text] = key
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def _json_key(key: Any) -> str:
    """A dict key as ``json`` writes it (the types its encoder takes as keys)."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return "true" if key is True else "false" if key is False else "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return float.__repr__(key)
    return repr(key)  # not a key JSON takes: the encoder has refused it already


class NotJSON(ValueError):
    """Why a value cannot be kept as JSON text (``to_json``): ``reason``, which each
    caller quotes after its own words, and ``not_unicode``, True when the text holds
    what UTF-8 cannot carry (a lone surrogate), which callers word apart."""

    def __init__(self, reason: str, not_unicode: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.not_unicode = not_unicode


def to_json(value: Any, encode: Callable[[Any], str] = _encoder.encode) -> str:
    """``value`` as JSON text that a store keeps and reads back as it was, or
    ``NotJSON`` saying why not: what the encoder refuses (NaN, a type it does not
    know), nesting past ``JSON_MOST_DEPTH`` or the recursion limit (R44), a lone
    surrogate, two keys of one dict written as one (R1). Arguments, results, metadata
    and saved states are written through here. A ``NotJSON``'s cause is the encoder's
    own error, where there is one."""
    try:
        check_object_depth(value)
        text = encode(value)
    except RecursionError:
        raise NotJSON("nested too deeply") from None
    except (TypeError, ValueError) as exc:
        raise NotJSON(str(exc)) from exc
    if bounds.not_unicode(text):
        raise NotJSON(bounds.NOT_UNICODE, not_unicode=True)
    if may_clash(text):
        clash = json_key_clash(value)
        if clash:
            raise NotJSON(clash)
    return text


def check_serializer(serializer: str) -> str:
    if serializer not in SERIALIZERS:
        raise EnqueueError(f"serializer must be one of {', '.join(SERIALIZERS)}, not {serializer!r}")
    return serializer


def encode_payload(args: Any, kwargs: Any, serializer: str = "json",
                   max_bytes: int = MAX_PAYLOAD_BYTES) -> str | bytes:
    """Encode ``[args, kwargs]``; refuse what cannot be encoded or is too big (R1)."""
    check_serializer(serializer)
    if not isinstance(args, (list, tuple)):
        raise EnqueueError(f"args must be a list or tuple, not {type(args).__name__}")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise EnqueueError("kwargs must be a dict with string keys")
    data: str | bytes
    if serializer == "json":
        try:
            data = to_json([list(args), kwargs])
        except NotJSON as exc:
            raise EnqueueError(f"payload {exc.reason}: JSON cannot carry it" if exc.not_unicode
                               else f"payload cannot be serialized as JSON: {exc.reason}"
                               ) from exc.__cause__
        size = bounds.utf8_size(data)
    else:
        import dill
        try:
            data = dill.dumps((tuple(args), kwargs))
        except Exception as exc:  # noqa: BLE001 - dill raises many types
            raise EnqueueError(f"payload cannot be pickled: {exc}") from exc
        size = len(data)
    if size > max_bytes:
        raise EnqueueError(f"payload is {size} bytes, over the {max_bytes}-byte limit")
    return data


class SerializerRefused(ValueError):
    """A stored payload asks for a more powerful decoder than its job declares (R39)."""


def decoder_for(row_serializer: str, job_serializer: str, what: str = "payload") -> str:
    """R39: the decoder for a stored value, judged by the registered job, not the row.

    Anyone who can write one row of the store chooses its ``serializer`` column, so
    the row may only ask for a decoder no more powerful than the one the job
    declares: a JSON row of a pickle job decodes as JSON (enqueue by name and chain
    steps write JSON), a pickle row of a JSON job is refused and never decoded.
    """
    if _POWER.get(row_serializer, len(_POWER)) > _POWER[job_serializer]:
        raise SerializerRefused(
            f"{what} refused: the row says serializer {row_serializer!r} but the job is "
            f"registered with {job_serializer!r}; it was not decoded")
    return row_serializer


def decode_payload(data: bytes | str, serializer: str) -> tuple[tuple, dict]:
    """Decode a stored payload back to ``(args, kwargs)``; raises ValueError if it cannot."""
    if serializer == "json":
        if type(data) is bytes and data[:1] == b"[" and data[1:2] != b"\0":
            # Bytes that start as a JSON array does in UTF-8 (no BOM, no NUL second
            # byte): the decoding ``json.loads`` would pick, done here without asking
            # again for every job. Other bytes (UTF-16 or -32, a BOM) and text go to it.
            check_depth(data)
            value = _decode_text(data.decode("utf-8", "surrogatepass"))
        else:
            value = loads(data)
        if (not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], list)
                or not isinstance(value[1], dict)):
            raise ValueError("payload is not a JSON [args, kwargs] pair")
        return tuple(value[0]), value[1]
    if serializer == "pickle":
        import dill
        args, kwargs = dill.loads(data)
        return tuple(args), dict(kwargs)
    raise ValueError(f"unknown serializer {serializer!r}")


def encode_result(value: Any, serializer: str = "json") -> str | bytes:
    """Encode a job's return value for storage; raises ValueError if it cannot."""
    if serializer == "pickle":
        import dill
        return dill.dumps(value)
    try:
        return to_json(value)
    except NotJSON as exc:
        raise ValueError(f"result {exc.reason}: JSON cannot carry it" if exc.not_unicode
                         else f"result cannot be serialized as JSON: {exc.reason}"
                         ) from exc.__cause__


#: The first byte of every pickle ``encode_result`` writes (protocol 2 and later); no
#: JSON text starts with it (it is not even a UTF-8 lead byte).
_PICKLE_START = 0x80


def result_serializer(data: bytes | str | None, row_serializer: str = "json") -> str:
    """The serializer a stored result was written with, read from the result itself.
    The row's ``serializer`` is its payload's: a job registered with pickle whose row
    was written as JSON (an enqueue by name, a chain step) keeps a pickled result in a
    JSON row; a pickle row's result is a pickle whatever its first byte (protocols 0
    and 1 start otherwise). Only which decoder to ask for is read here; ``decoder_for``
    still judges it against the registered job (R39)."""
    if row_serializer == "pickle":
        return "pickle"
    if isinstance(data, (bytes, bytearray, memoryview)) and len(data) and data[0] == _PICKLE_START:
        return "pickle"
    return "json"


def decode_result(data: bytes | str | None, serializer: str = "json") -> Any:
    if data is None:
        return None
    if serializer == "pickle":
        import dill
        return dill.loads(data)
    return loads(data)
