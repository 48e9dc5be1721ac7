"""Importance a user can trust: the start endowment is not importance.

A crawl from one seed puts all the initial cash on it. Cash orders the crawl (that is OPIC);
importance is measured on the credit (see :mod:`scrapy_opic.opic.engine`): a page that nothing
links to ends at PageRank's teleport share, and its children carry no shelf of borrowed
importance, with every estimator, in one-pass and continuous crawls.
"""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_opic._backends.crawl import Crawl
from scrapy_opic._backends.store import MemoryStore
from scrapy_opic.opic.config import CrawlConfig
from scrapy_opic.opic.contract import Entry
from scrapy_opic.opic.engine import OpicEngine
from scrapy_opic.opic.graph import Graph, from_edges, power_law_graph
from scrapy_opic.opic.pagerank import pagerank
from tests.support.frontiers import L, visit

WINDOWS = (
    "unbounded",
    "unbounded:lemma",
    "unbounded:regression",
    "interpolation:30",
    "variable:4",
    "fixed:5",
    "improved:5",
)


def seeded_graph(n: int = 300, kids: int = 25, seed: int = 1) -> tuple[Graph, np.ndarray]:
    """A power-law site plus a start page (id ``n``) that links to ``kids`` pages and that no
    page links to (a portal, a sitemap)."""
    g = power_law_graph(n, seed=seed)
    children = np.random.default_rng(seed).choice(n, kids, replace=False)
    src = np.concatenate([g.sources(), np.full(kids, n)])
    dst = np.concatenate([g.indices, children])
    return from_edges(src, dst, n + 1), children


def crawl(g: Graph, seed: int, window: str, continuous: bool) -> np.ndarray:
    """The Scrapy scheduler's path without Scrapy: a crawl in memory that discovers the graph
    from ``seed`` (5N fetches if continuous); the importance of every node."""
    config = CrawlConfig(refresh=1.0 if continuous else 0.0, window=window, continuous=continuous)
    frontier = Crawl(MemoryStore(), config)
    frontier.open({})
    engine = frontier.fleet.parts[0].frontier.engine
    frontier.schedule([Entry(seed, str(seed), payload=True)])
    for _ in range(5 * g.n if continuous else 2 * g.n):
        lease = frontier.pop()
        if lease is None:
            break
        links = [L(int(j), str(j), payload=True) for j in g.children(lease.key)]
        visit(frontier, lease, links)
    assert frontier.total_cash() == pytest.approx(1.0, abs=1e-9)
    x = engine.importance()
    return np.array([x[engine.id_of(i)] if i in engine else 0.0 for i in range(g.n)])


@pytest.mark.parametrize("continuous", [False, True], ids=["one-pass", "continuous"])
@pytest.mark.parametrize("window", WINDOWS)
def test_a_seed_nothing_links_to_ends_near_its_pagerank(window, continuous):
    g, children = seeded_graph()
    seed = g.n - 1
    pr = pagerank(g, 0.85)
    x = crawl(g, seed, window, continuous)
    assert x.sum() == pytest.approx(1.0)
    # The seed's PageRank is the teleport share alone, (1 - d) / N plus the dangling share.
    assert x[seed] <= 2 * pr[seed]
    assert x[seed] >= 0.5 * pr[seed]  # and it is not hidden either
    # No shelf: the seed's children hold about their PageRank, not a share of the endowment
    # (before the credit: 1.5 to 6.8 times it, depending on the window).
    assert x[children].sum() <= 1.75 * pr[children].sum()


def test_the_endowment_is_every_pages_prior_and_new_pages_get_it_too():
    # Back pay: a page discovered late holds the same teleport credit as one known from the
    # start, so the time of its discovery does not show in its importance.
    e = OpicEngine(epsilon=0.5)
    a = e.page("a")
    e.payout()  # the whole endowment goes to a (cash); every page's prior credit is 1
    e.visit(a, [e.page("b")])  # b receives link credit 0.5 (a held its prior 1)
    c = e.page("c")  # joins later, with nobody linking to it
    x = e.importance()
    # a and c have no in-links: both at the teleport share, whatever the cash says.
    assert e.cash_of(c) == 0.0 and e.cash_of(a) < e.cash_of(e.id_of("b"))
    assert x[a] == pytest.approx(x[c])
    assert x[a] == pytest.approx(e.teleport_share() / 3)


def test_a_redirect_moves_the_credit_with_the_cash():
    e = OpicEngine(epsilon=0.5, window="unbounded:lemma")
    src, dst, parent = e.page("old"), e.page("new"), e.page("p")
    e.payout()
    e.visit(parent, [src])  # old receives link credit
    held = e.held_credit[src]
    total = e.credit_total
    e.transfer(src, dst)
    assert e.held_credit[src] == 0.0
    # new receives what old held: its link credit and its teleport credit (the prior 1).
    assert e.held_credit[dst] == pytest.approx(held + 1.0)
    assert e.credit_total == pytest.approx(total + 1.0)
    assert e.credit_total == pytest.approx(float((e.hist[:3] + e.held_credit[:3]).sum()))


def test_dangling_pages_raise_the_teleport_share():
    # PageRank spreads a dangling page's rank uniformly: the share measured on the credit
    # flow through dangling pages raises every page's floor.
    e = OpicEngine(epsilon=0.2)
    pages = [e.page(k) for k in "abcd"]
    e.payout()
    assert e.teleport_share() == pytest.approx(0.2)  # nothing passed yet
    e.visit(pages[0], pages[1:3])
    e.visit(pages[3], [])  # dangling: its credit is spent
    passed = e.credit_passed
    assert e.credit_dangling == pytest.approx(1.0) and passed == pytest.approx(2.0)
    assert e.teleport_share() == pytest.approx(0.2 + 0.8 * 0.5)
