"""Scrapy's and OPIC's commands as a new user runs them, in a fresh project against a local site:
which commands may touch the OPIC state, what every command prints, what the help says."""

from __future__ import annotations

import pytest

from tests.project import Project
from tests.sites import Site, site_graph

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A project, a 60-page site, and the state of one crawl of it (default location)."""
    root = tmp_path_factory.mktemp("commands")
    project = Project(root / "proj")
    with Site(site_graph(60, seed=1)) as site:
        run = project.scrapy("crawl", "site", "-a", f"start_url={site.url(0)}")
        assert run.returncode == 0, run.out[-3000:]
        yield project, site


def _opic_files(project: Project) -> dict[str, str]:
    """Every OPIC state file of the project (not Scrapy's own JOBDIR files), with its hash."""
    return {k: v for k, v in project.files().items() if "opic" in k and k.endswith(".sqlite")}


@pytest.mark.parametrize(
    "command",
    [
        ["parse", "{url}", "--spider", "site", "-c", "parse"],
        ["parse", "{url}", "--spider", "site", "-c", "parse", "-s", "JOBDIR=job"],
        ["fetch", "--nolog", "{url}"],
        ["fetch", "--nolog", "{url}", "-s", "JOBDIR=job"],
        ["shell", "{url}", "-c", "response.status"],
        ["view", "--no-redirect", "{url}", "-s", "EDITOR=true"],
    ],
    ids=["parse", "parse-jobdir", "fetch", "fetch-jobdir", "shell", "view"],
)
def test_only_crawls_write_opic_state(world, command, monkeypatch):
    project, site = world
    before = _opic_files(project)
    assert list(before) == [".scrapy/opic/site.sqlite"]
    monkeypatch.setenv("BROWSER", "true")  # (scrapy view opens a browser: a no-op here)
    run = project.scrapy(*(a.replace("{url}", site.url(3)) for a in command))
    assert run.returncode == 0, run.out[-3000:]
    assert not run.errors(), run.out[-3000:]
    assert _opic_files(project) == before  # the last crawl's state as it was, no state created
