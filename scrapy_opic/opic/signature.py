"""A content signature: did the page change in a way a reader would notice?

Two responses with the same signature are "unchanged" (a change observation, and no reason to
call the spider's callback again). Modes:

* ``body``: the bytes as served. Any byte counts: a session token, a CSRF field, a nonce in a
  script, a server-rendered clock.
* ``text`` (default): the visible text. Removed: ``<script>``, ``<style>``, ``<noscript>`` and
  ``<template>`` elements with their content, comments, then every tag; runs of whitespace
  count as one space. A clock or counter written by a script, a tracking snippet, a changed
  class attribute or reflowed markup is no change; changed words are.

``ignore_digits`` also turns every run of digits into one ``0``: for a clock, a date, a view
counter or a "generated in 12 ms" in the visible text itself. It also hides real changes made
only of digits (a price, a score), hence off by default. ``drop``: a regular expression (bytes)
of more regions to ignore (``rb"<footer.*?</footer>"``), removed before anything else.

Regular expressions over bytes, no parser and no decoding: markup is ASCII whatever the
charset, and an unclosed ``<script>`` or comment runs to the end of the document, as in a
browser, so every pattern matches in linear time. The signature is 64 bits of BLAKE2b, a
signed int that fits an int64 column (a false "unchanged" has probability 2^-64 per comparison).
"""

from __future__ import annotations

import hashlib
import re

MODES = ("body", "text")

_HIDDEN = re.compile(
    rb"<(script|style|noscript|template)\b.*?(?:</\1\s*>|\Z)|<!--.*?(?:-->|\Z)", re.S | re.I
)
_TAG = re.compile(rb"<[a-zA-Z/!?][^>]*>?")  # ("a < b" is text)
_SPACE = re.compile(rb"\s+")
_DIGITS = re.compile(rb"\d+")


def visible_text(
    body: bytes | str, ignore_digits: bool = False, drop: bytes | None = None
) -> bytes:
    """The text ``text`` mode hashes (see the module docstring)."""
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
    if drop:
        data = re.sub(drop, b" ", data, flags=re.S | re.I)
    data = _HIDDEN.sub(b" ", data)
    data = _TAG.sub(b" ", data)
    if ignore_digits:
        data = _DIGITS.sub(b"0", data)
    return _SPACE.sub(b" ", data).strip()


def signature(
    body: bytes | str,
    mode: str = "text",
    ignore_digits: bool = False,
    drop: bytes | None = None,
) -> int:
    """The signature of a response body (``str`` is taken as UTF-8): see the module docstring."""
    if mode == "body":
        data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
    elif mode == "text":
        data = visible_text(body, ignore_digits, drop)
    else:
        raise ValueError(f"signature mode {mode!r}: expected one of {MODES}")
    digest = hashlib.blake2b(data, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
