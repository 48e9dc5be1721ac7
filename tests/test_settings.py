"""The OPIC_* settings: one table, one reader that checks every value, the README table that
documents them, and the add-on that installs the components."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scrapy.exceptions import IgnoreRequest

from scrapy_opic._settings import DEFAULTS, SETTINGS, OpicSettings, OpicSettingsError

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_settings_table_matches_the_table():
    rows = re.findall(r"^\| `(OPIC_\w+)` \| `([^`]*)` \| (.*) \|$", README.read_text(), re.M)
    assert [r[0] for r in rows] == list(DEFAULTS)
    for name, default, meaning in rows:
        assert default == repr(DEFAULTS[name][0]) and meaning == DEFAULTS[name][1], name


def test_every_setting_is_a_field_and_every_default_is_accepted():
    s = OpicSettings.from_settings({})
    for setting in SETTINGS:
        assert hasattr(s, setting.field), setting.name
        setting.parse(setting.default)  # the default passes its own parser


def test_defaults_depend_on_the_crawl_mode():
    one_pass = OpicSettings.from_settings({})
    assert (one_pass.refresh, one_pass.window) == (0.0, "unbounded")
    continuous = OpicSettings.from_settings({"OPIC_CONTINUOUS": "true"})
    assert continuous.refresh == 1.0 and continuous.window == "adaptive:30"
    explicit = OpicSettings.from_settings({"OPIC_REFRESH": "0.3", "OPIC_WINDOW": "Fixed:10"})
    assert explicit.refresh == 0.3 and explicit.window == "fixed:10"


@pytest.mark.parametrize(
    "name,value,allowed",
    [
        ("OPIC_EPSILON", "2", "(0, 1]"),
        ("OPIC_EPSILON", "abc", "(0, 1]"),
        ("OPIC_EPSILON", 0, "(0, 1]"),
        ("OPIC_EPSILON", True, "(0, 1]"),
        ("OPIC_REFRESH", 5, "[0, 1]"),
        ("OPIC_INTERNAL_WEIGHT", -1, ">= 0"),
        ("OPIC_EXTERNAL_WEIGHT", "nan", ">= 0"),
        ("OPIC_BOOST", -1, ">= 0"),
        ("OPIC_BOOST", "nan", ">= 0"),
        ("OPIC_BOOST", "inf", ">= 0"),
        ("OPIC_WINDOW", "fixed:10:wall:extra", "fixed:T[:wall]"),
        ("OPIC_WINDOW", "garbage", "interpolation:T[:wall]"),
        ("OPIC_WINDOW", "interpolation:-3", "interpolation:T[:wall]"),
        ("OPIC_CONTINUOUS", "maybe", "true or false"),
        ("OPIC_COMMIT_VISITS", 0, ">= 1"),
        ("OPIC_COMMIT_VISITS", "ten", ">= 1"),
        ("OPIC_COMMIT_SECONDS", 0, "> 0"),
        ("OPIC_MEMORY_REQUESTS", -5, ">= 0"),
        ("OPIC_STRATEGY", "foo", "'greedy', 'random', 'cycle'"),
        ("OPIC_REFUSED_LINKS", "drop", "'ignore', 'virtual'"),
        ("OPIC_BOOST_PATTERNS", "(unclosed", "regular expressions"),
        ("OPIC_BOOST_PATTERNS", '["ok", "[bad"]', "regular expressions"),
        ("OPIC_BOOST_PATTERNS", '["ok", ""]', "regular expressions"),
        ("OPIC_STORE", "mongo", "'sqlite', 'redis'"),
        ("OPIC_EXPORT", "out.xyz", ".csv"),
        ("OPIC_EXPORT", 3, ".csv"),
        ("OPIC_EXPORT", '{"x.csv": {"format": "xml"}}', "unknown options"),
        ("OPIC_EXPORT", "{not json", "valid JSON"),
        ("OPIC_SEED", "x", "whole number"),
        ("OPIC_REDIS_URL", "http://db:6379", "redis://"),
        ("OPIC_REDIS_LEASE", 0, "> 0"),
        ("OPIC_REDIS_KEY", " ", "non-empty"),
        ("OPIC_REDIS_RESET", "perhaps", "true or false"),
        ("OPIC_KEEP_LINKS", "maybe", "true or false"),
        ("OPIC_KEEP_LINKS", 2, "true or false"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_setting_the_value_and_what_is_allowed(
    name, value, allowed
):
    with pytest.raises(OpicSettingsError) as error:
        OpicSettings.from_settings({name: value})
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{name}={value!r} is not valid")
    assert allowed in message, message


def test_combinations_the_redis_store_does_not_run_are_refused():
    for bad in (
        {"OPIC_STRATEGY": "random"},
        {"OPIC_KEEP_LINKS": "true"},
    ):
        with pytest.raises(OpicSettingsError, match="embedded-store only"):
            OpicSettings.from_settings({"OPIC_STORE": "redis", **bad})
    # Every window runs on Redis: its partitions run the engine itself.
    assert OpicSettings.from_settings({"OPIC_STORE": "redis", "OPIC_WINDOW": "variable:4"})
    with pytest.raises(OpicSettingsError, match="both 0"):
        OpicSettings.from_settings({"OPIC_INTERNAL_WEIGHT": 0, "OPIC_EXTERNAL_WEIGHT": "0"})


def test_list_and_dict_settings_accept_json_from_the_command_line():
    one = OpicSettings.from_settings({"OPIC_BOOST_PATTERNS": r"/p/\d{1,3}\.html"})
    assert [p.pattern for p in one.boost_patterns] == [r"/p/\d{1,3}\.html"]  # commas kept
    many = OpicSettings.from_settings({"OPIC_BOOST_PATTERNS": '["/p/1", "/news/"]'})
    assert [p.pattern for p in many.boost_patterns] == ["/p/1", "/news/"]
    export = OpicSettings.from_settings({"OPIC_EXPORT": '{"a.csv": {"top": 5}, "b.jl": null}'})
    assert export.export == {
        "a.csv": {"top": 5, "fetched_only": False, "by_site": False},
        "b.jl": {"top": None, "fetched_only": False, "by_site": False},
    }


def test_python_values_a_settings_module_holds_are_taken_as_they_are():
    from pathlib import Path

    compiled = re.compile(r"/news/\d+")
    s = OpicSettings.from_settings(
        {"OPIC_BOOST_PATTERNS": [compiled, "/blog/"], "OPIC_EXPORT": Path("out/imp.csv")}
    )
    assert s.boost_patterns[0] is compiled and s.boost_patterns[1].search("/blog/x")
    assert list(s.export) == ["out/imp.csv"]
    assert OpicSettings.from_settings({"OPIC_BOOST_PATTERNS": ""}).boost_patterns == []  # -s X=
    assert OpicSettings.from_settings({"OPIC_BOOST_PATTERNS": compiled}).boost_patterns == [
        compiled
    ]


def test_export_setting_forms():
    assert OpicSettings.from_settings({}).export == {}
    one = OpicSettings.from_settings({"OPIC_EXPORT": "imp.csv"}).export
    assert one == {"imp.csv": {"top": None, "fetched_only": False, "by_site": False}}
    many = OpicSettings.from_settings(
        {"OPIC_EXPORT": {"all.jsonl": None, "sites.csv": {"by_site": "true", "top": 5}}}
    ).export
    assert many["all.jsonl"]["by_site"] is False
    assert many["sites.csv"] == {"top": 5, "fetched_only": False, "by_site": True}


def test_log_interval_follows_logstats_interval():
    assert OpicSettings.from_settings({"LOGSTATS_INTERVAL": 30.0}).logstats_interval == 30.0
    off = OpicSettings.from_settings({"LOGSTATS_INTERVAL": 30.0, "OPIC_LOGSTATS": False})
    assert off.logstats_interval == 0.0


def test_every_component_of_a_crawler_shares_one_reading():
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(settings_dict={"OPIC_EPSILON": "0.2"})
    first = OpicSettings.from_crawler(crawler)
    assert first is OpicSettings.from_crawler(crawler) and first.epsilon == 0.2


def test_reading_the_settings_loads_no_backend_and_no_scrapy():
    code = (
        "import sys, scrapy_opic._settings as s; s.OpicSettings.from_settings({}); "
        "print(sorted(m for m in ('scrapy', 'sqlitedict', 'redis', "
        "'scrapy_opic._backends.sqlite', 'scrapy_opic._backends.redis') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_addon_installs_everything_and_keeps_a_projects_own_positions():
    from scrapy.utils.test import get_crawler

    from scrapy_opic._extensions import OpicLogStats
    from scrapy_opic._middlewares import OpicDownloaderMiddleware, OpicSpiderMiddleware

    plain = get_crawler(settings_dict={"ADDONS": {"scrapy_opic.Addon": 0}}).settings
    assert plain["SCHEDULER"] == "scrapy_opic.OpicScheduler"
    assert plain.getdict("SPIDER_MIDDLEWARES")[OpicSpiderMiddleware] == 75
    assert plain.getdict("DOWNLOADER_MIDDLEWARES")[OpicDownloaderMiddleware] == 540
    assert plain.getdict("EXTENSIONS")[OpicLogStats] == 500
    own = get_crawler(
        settings_dict={
            "ADDONS": {"scrapy_opic.Addon": 0},
            "SCHEDULER": "tests.support.crawl_runner.SlotBlindScheduler",
            "SPIDER_MIDDLEWARES": {"scrapy_opic.OpicSpiderMiddleware": 60},
            "EXTENSIONS": {"scrapy_opic.OpicLogStats": None},  # switched off by the project
        }
    ).settings
    assert own["SCHEDULER"] == "tests.support.crawl_runner.SlotBlindScheduler"
    spider_mws = own.getdict("SPIDER_MIDDLEWARES")
    assert spider_mws.get("scrapy_opic.OpicSpiderMiddleware") == 60
    assert OpicSpiderMiddleware not in spider_mws
    assert own.getdict("EXTENSIONS") == {"scrapy_opic.OpicLogStats": None}


def test_the_addon_wraps_the_download_handlers_of_a_redis_crawl_and_keeps_a_projects_own():
    """For OPIC_STORE = "redis" the add-on wraps the http and https handlers (Scrapy's, or
    the project's own) in its own, which look last before a request goes out; a scheme the
    project switched off stays off; other stores keep Scrapy's handlers."""
    import asyncio

    from scrapy.http import Request
    from scrapy.utils.misc import load_object
    from scrapy.utils.test import get_crawler

    from scrapy_opic._handler import OpicHttpsHandler
    from scrapy_opic._sending import WRAPPED, installed, wrapped_handler

    embedded = get_crawler(settings_dict={"ADDONS": {"scrapy_opic.Addon": 0}}).settings
    assert not installed(embedded) and WRAPPED not in embedded
    own_https = "tests.test_settings.RecordingHandler"
    settings = {
        "ADDONS": {"scrapy_opic.Addon": 0},
        "OPIC_STORE": "redis",
        "DOWNLOAD_HANDLERS": {"https": own_https, "ftp": None},
    }
    crawler = get_crawler(settings_dict=settings)
    s = crawler.settings
    handlers = s.getwithbase("DOWNLOAD_HANDLERS")
    assert installed(s) and handlers["ftp"] is None
    assert load_object(handlers["https"]) is OpicHttpsHandler
    assert s.getdict(WRAPPED)["https"] == own_https
    scrapys = get_crawler(settings_dict={}).settings.getwithbase("DOWNLOAD_HANDLERS")["http"]
    assert wrapped_handler(s, "http") == scrapys
    # The wrapper sends through the project's handler, unless the scheduler refuses.
    handler = OpicHttpsHandler.from_crawler(crawler)
    assert isinstance(handler.wrapped, RecordingHandler)
    request = Request("https://example.com/")
    assert asyncio.run(handler.download_request(request)) == "sent"
    handler._refused = lambda r: True
    with pytest.raises(IgnoreRequest, match="not sent"):
        asyncio.run(handler.download_request(request))
    assert handler.wrapped.sent == [request]


class RecordingHandler:
    """A project's own download handler (the add-on's wrapper's test)."""

    lazy = True

    def __init__(self) -> None:
        self.sent: list = []

    @classmethod
    def from_crawler(cls, crawler):
        return cls()

    async def download_request(self, request):
        self.sent.append(request)
        return "sent"

    async def close(self) -> None:
        pass


def test_keep_links_is_a_boolean_and_a_resume_checks_it():
    from scrapy_opic._backends import StoreError
    from scrapy_opic._state import check_resume

    assert OpicSettings.from_settings({}).keep_links is False
    on = OpicSettings.from_settings({"OPIC_KEEP_LINKS": "True"})
    assert on.keep_links is True
    saved = {"spider": "s", "crawl": dataclasses.asdict(OpicSettings.from_settings({}).crawl)}
    with pytest.raises(
        StoreError,
        match="OPIC_KEEP_LINKS=False there, True here.*resume it with -s OPIC_KEEP_LINKS=False,",
    ):
        check_resume(on.crawl, "s", saved, "JOBDIR j")
    check_resume(OpicSettings.from_settings({}).crawl, "s", saved, "JOBDIR j")
    # A continuous crawl made before refetches by freshness (no kept links, no OPIC_REFETCH
    # saved): freshness keeps links whatever OPIC_KEEP_LINKS says, so the advice that works
    # is OPIC_REFETCH=cash, and following it resumes the crawl.
    old = dataclasses.asdict(OpicSettings.from_settings({"OPIC_CONTINUOUS": True}).crawl)
    old = {k: v for k, v in old.items() if k != "refetch"} | {"keep_links": False}
    saved = {"spider": "s", "crawl": old}
    now = OpicSettings.from_settings({"OPIC_CONTINUOUS": True, "OPIC_KEEP_LINKS": False})
    with pytest.raises(StoreError, match=r"resume it with -s OPIC_REFETCH=cash, or"):
        check_resume(now.crawl, "s", saved, "JOBDIR j")
    advised = OpicSettings.from_settings({"OPIC_CONTINUOUS": True, "OPIC_REFETCH": "cash"})
    check_resume(advised.crawl, "s", saved, "JOBDIR j")


def test_a_misspelled_setting_is_named_with_the_closest_one():
    from scrapy_opic._settings import unknown_settings

    lines = unknown_settings(
        {
            "OPIC_EPSILLON": 0.3,
            "OPIC_CONTINOUS": True,
            "OPIC_WINDOWS": "interpolation:10",
            "OPIC_ZZZ": 1,
            "OPIC_EPSILON": 0.2,  # correct: not named
            "DOWNLOAD_DELAY": 1,  # not ours
        }
    )
    assert len(lines) == 4, lines
    said = dict(line.split(" is not an OPIC setting", 1) for line in lines)
    assert "did you mean OPIC_CONTINUOUS?" in said["OPIC_CONTINOUS"]
    assert "did you mean OPIC_EPSILON?" in said["OPIC_EPSILLON"]
    assert "did you mean OPIC_WINDOW?" in said["OPIC_WINDOWS"]
    assert "no OPIC setting is close" in said["OPIC_ZZZ"]


def test_a_crawl_warns_of_misspelled_settings_from_the_command_line_and_the_spider(caplog):
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    class Typo(Spider):
        name = "typo"
        custom_settings = {"OPIC_CONTINOUS": True}

    crawler = get_crawler(Typo, settings_dict={"OPIC_EPSILLON": "0.3"})
    with caplog.at_level("WARNING", logger="scrapy_opic"):
        OpicSettings.from_crawler(crawler)
        OpicSettings.from_crawler(crawler)  # said once per crawl
    said = [r.getMessage() for r in caplog.records if "not an OPIC setting" in r.getMessage()]
    assert len(said) == 2, said
    assert any("OPIC_CONTINOUS" in m and "OPIC_CONTINUOUS?" in m for m in said)
    assert any("OPIC_EPSILLON" in m and "OPIC_EPSILON?" in m for m in said)
