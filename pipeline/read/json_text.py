"""The text of a JSON object's values exactly as written in the line: ``{"id": 1.50}`` -> {"id": "1.50"}.

``json.loads`` turns ``1.50`` into the float 1.5, and printing it again gives "1.5", which collides
with a real id ``1.5``; ``1E+3`` would come back as "1000.0". The line formats keep a non-string
value as its JSON text, so that text is cut from the line itself: this walks the top-level object
with the standard library's own scanners (``json.decoder.scanstring`` for keys, the decoder's
``scan_once`` for each value, which gives where the value ends). For a record whose needed values are not all
strings, after ``json.loads`` has accepted the line.
"""
from __future__ import annotations

import json
import json.decoder
import re

_SPACE = re.compile(r"[ \t\n\r]*")
_SCAN = json.decoder.JSONDecoder().scan_once


def raw_values(text: str, keys: list[str]) -> dict[str, str]:
    """The characters of each value of ``keys`` in the JSON object ``text`` holds, as written.

    Args:
        text: one line that ``json.loads`` parsed as an object (so the walk cannot fail).
        keys: the keys whose values are wanted (each must be in the object).

    Returns:
        key -> the value's characters: '{"a": 1.50, "b": [1,  2]}' with ["a", "b"] -> {"a": "1.50", "b": "[1,  2]"}.

    Example: raw_values('{"id": 1E+3}', ["id"]) -> {"id": "1E+3"}
    """
    wanted, out = set(keys), {}
    at = _SPACE.match(text, 0).end()
    assert text[at] == "{", "raw_values needs a line json.loads read as an object"
    at = _SPACE.match(text, at + 1).end()
    while text[at] != "}" and len(out) < len(wanted):
        key, at = json.decoder.scanstring(text, at + 1)     # at: just after the key's opening quote
        at = _SPACE.match(text, _SPACE.match(text, at).end() + 1).end()  # past ':' and spaces
        _, end = _SCAN(text, at)
        if key in wanted:
            out[key] = text[at:end]
        at = _SPACE.match(text, end).end()
        if text[at] == ",":
            at = _SPACE.match(text, at + 1).end()
    return out
