"""The content signature: what counts as a change in each mode."""

from __future__ import annotations

import pytest

from scrapy_opic.opic.signature import signature, visible_text

PAGE = b"""<!DOCTYPE html>
<html><head><title>Release notes</title>
<style>body { color: #333 }</style>
<script src="/app.js"></script>
<script>var t = new Date(); document.write(t)</script>
</head>
<body class="a">
  <!-- rendered by node 7 -->
  <p>Version   2 adds <b>streaming</b>.</p>
  <footer>Generated at 12:30:05</footer>
</body></html>"""


def variant(old: bytes, new: bytes, page: bytes = PAGE) -> bytes:
    assert old in page
    return page.replace(old, new)


@pytest.mark.parametrize(
    "old,new",
    [
        (b"new Date()", b"Date.now()"),  # a script
        (b"color: #333", b"color: #444"),  # a style
        (b"node 7", b"node 8"),  # a comment
        (b'class="a"', b'class="b" data-x="1"'),  # attributes
        (b"<b>streaming</b>", b"<em>streaming</em>"),  # markup around the same words
        (b"Version   2 adds", b"Version 2\n\tadds"),  # whitespace
    ],
)
def test_text_mode_ignores_scripts_styles_comments_markup_and_whitespace(old, new):
    changed = variant(old, new)
    assert signature(changed) == signature(PAGE)
    assert signature(changed, "body") != signature(PAGE, "body")


def test_text_mode_sees_changed_words():
    assert signature(variant(b"streaming", b"batching")) != signature(PAGE)
    assert signature(variant(b"Release notes", b"Release note")) != signature(PAGE)


def test_digits_in_visible_text_count_unless_ignored():
    clock = variant(b"12:30:05", b"12:31:17")
    assert signature(clock) != signature(PAGE)
    assert signature(clock, ignore_digits=True) == signature(PAGE, ignore_digits=True)
    # Ignoring digits also hides a change made of digits alone: hence off by default.
    version = variant(b"Version   2", b"Version   3")
    assert signature(version, ignore_digits=True) == signature(PAGE, ignore_digits=True)


def test_a_drop_pattern_removes_a_region():
    clock = variant(b"12:30:05", b"12:31:17")
    drop = rb"<footer\b.*?</footer>"
    assert signature(clock, drop=drop) == signature(PAGE, drop=drop)
    assert signature(variant(b"streaming", b"batching"), drop=drop) != signature(PAGE, drop=drop)


def test_visible_text():
    assert visible_text(PAGE) == b"Release notes Version 2 adds streaming . Generated at 12:30:05"
    assert visible_text(b"a < b and c > d") == b"a < b and c > d"  # no tag: text
    assert visible_text(b"<p>x<script>never closed <p>y") == b"x"  # runs to the end
    assert visible_text(b"x<!-- never closed <p>y") == b"x"
    assert visible_text(b"<SCRIPT type=x>1</SCRIPT >z") == b"z"


def test_str_is_utf8_and_the_signature_is_a_signed_64_bit_int():
    text = PAGE.decode() + " café"
    assert signature(text) == signature(text.encode())
    assert signature(text, "body") == signature(text.encode(), "body")
    sigs = {signature(f"<p>{k}</p>") for k in range(1000)}
    assert len(sigs) == 1000
    assert all(-(2**63) <= s < 2**63 for s in sigs)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode"):
        signature(PAGE, "dom")
