"""Plain values across a process boundary: a tagged JSON codec that admits only exact built-in types.

What: `encode(value) -> JSON-able` and `decode(obj) -> value` for None, bool, int, float, str, bytes, list, tuple,
dict, set and frozenset, nested up to `MAX_DEPTH`. Anything else (a class instance, a subclass of int whose
`__eq__` always says True, a generator) raises `ValueError`, so a program can only ever hand back data.

Why: the sandbox's runner and tester compare what a program returned after it crossed a pipe as plain data; an
object that lies about equality cannot cross. The trainer reads verdicts with `json` only: no pickle, no eval.

This file is also loaded inside the jail by `runner.py` (standard library only, Python 3.8 syntax).
"""

import json
import math

MAX_DEPTH = 64
MAX_INT_BITS = 1 << 20  # larger ints are refused rather than converted (str() of them is quadratic)
_EXACT = (type(None), bool, int, float, str)


def encode(value, depth=0):
    """`value` as JSON-able data with tags for the types JSON lacks; `ValueError` for anything else."""
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if kind is int:
        if value.bit_length() > MAX_INT_BITS:
            raise ValueError(f"int of {value.bit_length()} bits is too large")
        return value if abs(value) < 2**53 else {"$int": hex(value)}
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind in _EXACT:
        return value
    if kind is bytes:
        return {"$bytes": value.hex()}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"$tuple": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"$dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        items = sorted((encode(v, depth + 1) for v in value), key=canonical)
        return {"$frozenset" if kind is frozenset else "$set": items}
    raise ValueError(f"a value of type {kind.__name__} cannot leave the program (plain data only)")


def decode(obj):
    """The value `encode` made `obj` from."""
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    ((tag, body),) = obj.items()
    if tag == "$int":
        return int(body, 16)
    if tag == "$float":
        return float(body)
    if tag == "$bytes":
        return bytes.fromhex(body)
    if tag == "$tuple":
        return tuple(decode(v) for v in body)
    if tag == "$dict":
        return {decode(k): decode(v) for k, v in body}
    if tag == "$set":
        return {decode(v) for v in body}
    if tag == "$frozenset":
        return frozenset(decode(v) for v in body)
    raise ValueError(f"unknown tag {tag!r}")


def canonical(obj):
    """One string per encoded value (sorted keys, no spaces): what gold answers and two-seed runs compare."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
