"""Sphinx configuration of the documentation site: ``sphinx-build -W -c docs . docs/_build``
(from the repository's root, so that the README, the changelog and the benchmarks' results are
pages of the site, and the links between them resolve as they do on GitHub)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))

import _generate  # noqa: E402

project = "scrapy-opic"
author = "the scrapy-opic authors"
copyright = "2026, the scrapy-opic authors"  # noqa: A001 (Sphinx's name)
extensions = ["myst_parser", "sphinx.ext.autodoc"]
root_doc = "docs/index"
include_patterns = [
    "README.md",
    "CHANGELOG.md",
    "docs/*.md",
    "docs/*.png",
    "docs/_generated/*.md",
    "benchmarks/results/*.md",
    "benchmarks/results/*.png",
]
exclude_patterns = ["docs/_build"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "alabaster"
html_title = "scrapy-opic"
# The site's pages live under docs/ (the root document is docs/index): an index.html at the
# root of the built site leads there.
html_extra_path = ["_root"]

_generate.write_all(ROOT / "docs" / "_generated")
