"""The OPIC_* settings: defaults, validation, and the README table that documents them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scrapy_opic.settings import DEFAULTS, OpicSettings

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_settings_table_matches_the_defaults():
    rows = re.findall(r"^\| `(OPIC_\w+)` \| `([^`]*)` \| (.*) \|$", README.read_text(), re.M)
    assert [r[0] for r in rows] == list(DEFAULTS)
    for name, default, meaning in rows:
        assert default == repr(DEFAULTS[name][0]) and meaning == DEFAULTS[name][1], name


def test_defaults_depend_on_the_crawl_mode():
    one_pass = OpicSettings.from_settings({})
    assert (one_pass.refresh, one_pass.window) == (0.0, "unbounded")
    continuous = OpicSettings.from_settings({"OPIC_CONTINUOUS": "true"})
    assert continuous.refresh == 1.0 and continuous.window.startswith("interpolation")
    explicit = OpicSettings.from_settings({"OPIC_REFRESH": 0.3, "OPIC_BOOST_PATTERNS": "a,b"})
    assert explicit.refresh == 0.3 and [p.pattern for p in explicit.boost_patterns] == ["a", "b"]


@pytest.mark.parametrize(
    "bad",
    [
        {"OPIC_STRATEGY": "best"},
        {"OPIC_REFUSED_LINKS": "drop"},
        {"OPIC_WINDOW": "interpolation:-3"},
    ],
)
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        OpicSettings.from_settings(bad)


def test_export_setting_forms():
    assert OpicSettings.from_settings({}).export == {}
    one = OpicSettings.from_settings({"OPIC_EXPORT": "imp.csv"}).export
    assert one == {"imp.csv": {"top": None, "fetched_only": False, "by_site": False}}
    many = OpicSettings.from_settings(
        {"OPIC_EXPORT": {"all.jsonl": None, "sites.csv": {"by_site": True, "top": 5}}}
    ).export
    assert many["all.jsonl"]["by_site"] is False
    assert many["sites.csv"] == {"top": 5, "fetched_only": False, "by_site": True}
    with pytest.raises(ValueError, match="unknown options"):
        OpicSettings.from_settings({"OPIC_EXPORT": {"x.csv": {"format": "xml"}}})
    with pytest.raises(ValueError):
        OpicSettings.from_settings({"OPIC_EXPORT": 3})
    with pytest.raises(ValueError, match="unknown output format"):
        OpicSettings.from_settings({"OPIC_EXPORT": "out.json"})


def test_log_interval_follows_logstats_interval():
    assert OpicSettings.from_settings({"LOGSTATS_INTERVAL": 30.0}).logstats_interval == 30.0
    off = OpicSettings.from_settings({"LOGSTATS_INTERVAL": 30.0, "OPIC_LOGSTATS": False})
    assert off.logstats_interval == 0.0
