"""A continuous crawl of a site that changes under it, judged by the server's access log."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from scrapy_opic.opic.graph import from_edges
from tests.support.sites import ChangingSite, site_graph
from tests.test_crawl import crawl, node

N, NEW = 40, 5  # old pages, new pages
REMOVED_404, REMOVED_410 = {7, 12, 23}, {31}
SWITCH = 3 * N  # the server changes at its 120th page request


def graphs():
    """The site before the change, and after it: four pages removed (every link to them left
    in place: broken links keep paying them until the crawl learns they are gone), five new
    pages linked from the home page and from each other, and a fifth of the links moved."""
    g = site_graph(N, seed=7)  # a home page (0) linking to 20 pages, every page linking home
    total = N + NEW
    before = from_edges(g.sources(), g.indices, total)
    rng = np.random.default_rng(7)
    removed = np.array(sorted(REMOVED_404 | REMOVED_410))
    src, dst = g.sources(), g.indices.astype(np.int64).copy()
    keep = ~np.isin(src, removed)
    src, dst = src[keep], dst[keep]
    live = np.setdiff1d(np.arange(N), removed)
    moved = ~np.isin(dst, removed) & (rng.random(dst.size) < 0.2)
    dst[moved] = rng.choice(live, int(moved.sum()))
    new = np.arange(N, total)
    src = np.concatenate([src, np.zeros(NEW, dtype=np.int64), new, new, np.roll(new, 1)])
    dst = np.concatenate([dst, new, np.zeros(NEW, dtype=np.int64), np.roll(new, -1), new])
    return before, from_edges(src, dst, total)


@pytest.mark.slow
def test_a_site_that_changes_mid_crawl(tmp_path):
    from scrapy_opic.export import open_state

    before, after = graphs()
    new = set(range(N, N + NEW))
    removed = REMOVED_404 | REMOVED_410
    with ChangingSite(
        before, after, SWITCH, new=new, removed=removed, gone_410=REMOVED_410
    ) as site:
        _, stats = crawl(
            tmp_path,
            site.url(0),
            OPIC_CONTINUOUS=True,
            CLOSESPIDER_PAGECOUNT=SWITCH + 5 * N,
            CONCURRENT_REQUESTS=4,
        )
        log = list(site.log)
    assert site.changed and stats["finish_reason"] == "closespider_pagecount"
    before_change = Counter(i for k, i, _ in log if k <= SWITCH)
    after_change = Counter(i for k, i, _ in log if k > SWITCH)
    # Every page was fetched before the change (so each removed page was known and paid).
    assert set(before_change) == set(range(N))
    # A removed page is asked for once after the change, answers 404 (or 410), and never again,
    # though broken links to it remain on pages that are fetched again and again.
    for i in removed:
        assert after_change[i] == 1, (i, after_change[i])
    assert {s for _, i, s in log if i in removed and s != 200} == {404, 410}
    # The new section, linked from the home page, is found and every page of it fetched.
    assert new <= set(after_change)
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)
    with open_state(tmp_path / ".scrapy" / "opic" / "site.sqlite") as state:
        pages = {node(p.url): p for p in state.pages()}
        window = state.engine.window
    # The continuous default window saw the links move and shrank: it is growing back with
    # the time since.
    assert window.spec() == "adaptive:30" and window.changed_at is not None
    assert window.T_min <= window.window(state.engine.G) < window.T
    for i in REMOVED_404:
        assert pages[i].status == "http_404" and pages[i].cash == 0.0 and not pages[i].fetched
    for i in REMOVED_410:
        assert pages[i].status == "http_410" and pages[i].cash == 0.0
    assert all(pages[i].status == "ok" and pages[i].visits >= 1 for i in new)
    assert all(p.status == "ok" for i, p in pages.items() if i not in removed)


@pytest.mark.slow  # (the benchmark's site)
def test_the_benchmarks_change_removes_a_tenth_adds_a_section_and_moves_links():
    """``benchmarks.changing_site``'s change, on a generated graph (the benchmark serves the
    Django manual's): what the README says it does."""
    from benchmarks import changing_site as mod

    g = site_graph(500, seed=2)
    c = mod.change(g, 0, seed=3)
    n, total = c["n"], c["total"]
    removed, new = c["removed"], c["new"]
    assert removed.size == new.size == 50 and 0 not in removed and set(new) == set(range(n, total))
    assert 0 < c["gone_410"].size < removed.size and set(c["gone_410"]) <= set(removed)
    before, after = c["before"], c["after"]
    assert before.in_degree[new].sum() == before.out_degree[new].sum() == 0  # not there yet
    assert after.out_degree[removed].sum() == 0  # a removed page links nowhere
    assert n in after.children(0)  # the home page links to the new section's index
    reach, todo = {0}, [0]
    while todo:
        for j in after.children(todo.pop()).tolist():
            if j not in reach:
                reach.add(j)
                todo.append(j)
    assert set(new) <= reach
    # Some links to removed pages were taken out, some left broken; a fifth of the rest moved.
    moved, taken_out, broken = c["links"]  # moved, taken out, left broken
    assert taken_out > 0 and broken > 0
    assert 0.15 < moved / g.n_edges < 0.25
    # The reference: removed pages are no pages; PageRank over the others sums to 1.
    assert set(c["new_ref"]["ids"]) == set(range(total)) - set(removed.tolist())
    assert c["new_ref"]["pr"].sum() == pytest.approx(1.0)
    assert list(c["old_ref"]["ids"]) == list(range(n))
    old = np.zeros(total)
    old[c["old_ref"]["ids"]] = c["old_ref"]["pr"]
    assert 0.3 < mod.tau(old, c["new_ref"]) < 0.95  # the change reorders the pages
