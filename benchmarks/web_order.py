"""Which pages a one-pass crawl fetches first, on web graphs: the PageRank share of its first
pages, beside the orders a crawl is judged against.

    python -m benchmarks.web_order [--graph EDGES] [--seeds 247028,263046,162973,265611]
        [--fraction 0.1] [--site-size 1024] [--generated 100000] [--beta 0.8]
        [--scrapy H [--delay D] [--concurrency C] [--fleet N --redis-url URL] [--continuous]
        [--runs R]] [--draws N]
        [--out ...]

Every order starts from one seed page and, at each step, fetches one page it has discovered
(a page it fetched links to it), one at a time; what it knows of the graph is the links of the
pages it fetched. The figure of an order is the share of the whole graph's PageRank (damping
0.85) held by its first ``--fraction`` of the graph's pages, and its ratio to
*frontier-omniscient*'s: among the pages discovered, always the one whose true PageRank is
highest (the best a crawler can do without knowing pages it has not discovered). The orders:

- ``bfs``: breadth-first (Scrapy's default order with ``DEPTH_PRIORITY``/FIFO queues);
- ``backlinks``: the most links from fetched pages;
- ``opic_cash``: the plugin's one-pass order by cash (``OPIC_ORDER = "cash"``), through the
  plugin's own frontier (the embedded store's code, in memory): the most cash;
- ``opic``: the plugin's one-pass order (``OPIC_ORDER = "web"``, the default), the same way;
  ``opic/H``: each host a download slot, the slots taking turns (without hosts, one slot: the
  order by votes in a host);
- ``opic_continuous_cash`` and ``opic_continuous``: the first fetches of the plugin's
  continuous crawl (``OPIC_CONTINUOUS``, refetches by cash), by cash and in the web order
  (its discovery pops take turns); ``opic_continuous/H`` as ``opic/H``;
- ``partial_pr``: partial PageRank (Cho, Garcia-Molina, Page 1998): the PageRank of the known
  graph (fetched pages and their links; pages not fetched yet dangle), recomputed every 1,000
  fetches, 30 power iterations;
- ``link_rank``: a candidate, online: every fetched page adds ``1 - ALPHA`` of rank (a teleport);
  rank is pushed along the links of fetched pages (damping ``ALPHA``), a page pushing only
  what it received since its last push and only above ``THETA``, so that a fetch costs a
  bounded, amortised number of pushes (counted); an unfetched page's score is the rank pushed
  to it. No recomputation of the known graph.
- ``link_votes``: link rank without the pushes through fetched pages: a page passes on, once,
  at its fetch, its own ``1 - ALPHA`` and what it received before (damping ``ALPHA``); what
  reaches a page already fetched goes no further. One float per page, no links kept: what the
  pushes add to the order over it is what keeping links would buy.
- ``depth_votes``: link votes, a page's votes discounted by ``BETA`` per link between it and
  the seed (its fewest links from the seed over fetched pages; one small int per page more).
- ``host_bfs/H`` and ``link_rank/H``: *host turns*: the hosts ``H`` take turns (the host with
  the fewest fetches so far among those with a page to fetch), each turn fetching the host's
  next page by breadth-first, or by link rank. ``host_bfs`` shows what the turns alone bring.
  ``weighted_link_rank/H``: turns in proportion to the square root of the rank a host received
  over links from other hosts, so that a host that only links to itself (an endless calendar)
  gets few turns.
- The trap: an endless calendar of its own host (every order that takes turns by host keeps
  out of it); and a site's own calendar on its one host (``benchmarks.crawl_evidence``'s trap
  site, offline), where only the order inside a host can keep out of it.

A host is a block of ``--site-size`` consecutive page ids (a URL-ordered graph, as cnr-2000 is,
keeps a site's pages together), or one of 16 equal blocks; the column names which.
``--generated N`` adds a graph of N pages made here with a host structure (hosts of Zipf sizes,
home and section pages that a host's pages link to, links across hosts to any page of popular
hosts), so that an order is not judged on one graph alone; and, with an endless calendar
added as one more host, the share of each order's fetches that the calendar takes.

``--scrapy H`` measures the plugin's order through Scrapy as well: the graph served on ``H``
loopback hosts (127.0.0.1 to 127.0.0.H, a host a block of consecutive ids), one ``scrapy``
process of the crawl runner's ``site`` spider per seed (``--delay``: ``DOWNLOAD_DELAY``), the
order read from the server's access log (the first ``--fraction`` of distinct pages fetched);
the results then go to ``web_order_scrapy<H>_delay<D>``. With ``--fleet N``, N such processes
share each crawl on Redis (``OPIC_STORE = "redis"``, its default partitions by host), each
closing after its share of the pages: ``web_order_scrapy<H>_delay<D>_fleet<N>``. With
``--continuous`` the crawl is continuous (``OPIC_CONTINUOUS``, its defaults), the order its
first fetches: ``..._continuous``. ``--runs R`` crawls each seed R times and gives the median
(``..._runs<R>``): which responses come back first moves a crawl's order.

``--draws N`` shows how far: the plugin's order offline as a crawl through Scrapy runs it,
16 requests out at once (8 per host, Scrapy's defaults), the next answer drawn at random
among them, N draws per seed and hosting beside the order one page at a time
(``..._draws<N>``).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import tempfile
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from itertools import islice
from pathlib import Path

import numpy as np

from benchmarks._harness import RESULTS, page, table, write_results
from benchmarks.crawl_evidence import crawl, start_crawl, trap_graph
from benchmarks.paper_figures import REAL_GRAPH
from scrapy_opic.opic.graph import Graph, from_edges, load_edge_list
from scrapy_opic.opic.pagerank import PowerIteration, pagerank
from tests.support.sites import CALENDAR_STEPS, Site

#: The candidate link rank's damping and push threshold (see the module docstring), and the
#: weighted host turns' floor of a host's inflow.
ALPHA = 0.5
THETA = 0.05
INFLOW_FLOOR = 0.5
#: ``depth_votes``: the discount of a page's votes per link between it and the seed
#: (``--beta``).
BETA = 0.8
#: Partial PageRank: fetches between recomputations, damping, power iterations.
PPR_EVERY, PPR_ALPHA, PPR_ITERATIONS = 1000, 0.85, 30
#: Requests out at once and per download slot in the draws with concurrency (``--draws``):
#: Scrapy's defaults, ``CONCURRENT_REQUESTS`` and ``CONCURRENT_REQUESTS_PER_DOMAIN``.
AT_ONCE, PER_SLOT = 16, 8

Order = Callable[["Crawlable", int, int, "np.ndarray | None"], list[int]]


class Crawlable:
    """A graph with what the orders share: out-links as lists (built once, on demand), true
    PageRank, edge arrays for partial PageRank."""

    def __init__(self, graph: Graph, name: str) -> None:
        self.graph, self.name, self.n = graph, name, graph.n
        self._kids: list[list[int] | None] = [None] * graph.n
        self.pr = pagerank(graph, alpha=0.85)
        self.src = graph.sources()
        self.dst = graph.indices.astype(np.int64)

    def kids(self, i: int) -> list[int]:
        k = self._kids[i]
        if k is None:
            k = self._kids[i] = self.graph.children(i).tolist()
        return k


def bfs(g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None) -> list[int]:
    seen, queue, out = {seed}, deque([seed]), []
    while queue and len(out) < stop:
        i = queue.popleft()
        out.append(i)
        for j in g.kids(i):
            if j not in seen:
                seen.add(j)
                queue.append(j)
    return out


def _greedy(g: Crawlable, seed: int, stop: int, key: Callable[[int], float]) -> list[int]:
    """Greedy on a key that only rises while a page waits (lazy heap)."""
    fetched = np.zeros(g.n, bool)
    heap, out = [(-key(seed), seed)], []
    while heap and len(out) < stop:
        k, i = heapq.heappop(heap)
        if fetched[i] or -k != key(i):
            continue
        fetched[i] = True
        out.append(i)
        for j in g.kids(i):
            if not fetched[j]:
                heapq.heappush(heap, (-key(j), j))
    return out


def omniscient(g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None) -> list[int]:
    pr = g.pr
    return _greedy(g, seed, stop, lambda i: float(pr[i]))


def backlinks(g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None) -> list[int]:
    count = np.zeros(g.n)
    fetched = np.zeros(g.n, bool)
    heap, out = [(0.0, seed)], []
    while heap and len(out) < stop:
        k, i = heapq.heappop(heap)
        if fetched[i] or -k != count[i]:
            continue
        fetched[i] = True
        out.append(i)
        for j in g.kids(i):
            if not fetched[j]:
                count[j] += 1
                heapq.heappush(heap, (-count[j], j))
    return out


def partial_pagerank(
    g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None
) -> list[int]:
    n = g.n
    fetched = np.zeros(n, bool)
    known = np.zeros(n, bool)
    known[seed] = True
    score = np.zeros(n)
    out: list[int] = []
    while len(out) < stop:
        if out:
            score = _known_pagerank(g, fetched, known)
        heap = [(-score[j], int(j)) for j in np.flatnonzero(known & ~fetched)]
        if not heap:
            break
        heapq.heapify(heap)
        for _ in range(PPR_EVERY):
            if not heap or len(out) >= stop:
                break
            _, i = heapq.heappop(heap)
            if fetched[i]:
                continue
            fetched[i] = True
            out.append(i)
            for j in g.kids(i):
                if not known[j]:
                    known[j] = True
                    heapq.heappush(heap, (-score[j], j))
    return out


def _known_pagerank(g: Crawlable, fetched: np.ndarray, known: np.ndarray) -> np.ndarray:
    """PPR_ITERATIONS power iterations of PageRank on the known graph (its pages: the known
    ones, so that the jump and the dangling pages' rank go to them alone), from uniform."""
    ids = np.flatnonzero(known)
    where = np.zeros(g.n, np.int64)
    where[ids] = np.arange(ids.size)
    m = fetched[g.src]
    graph = from_edges(where[g.src[m]], where[g.dst[m]], ids.size)
    x = next(islice(PowerIteration(graph, PPR_ALPHA).iterate(), PPR_ITERATIONS - 1, None))
    score = np.zeros(g.n)
    score[ids] = x
    return score


class LinkRank:
    """The candidate order's estimator (see the module docstring): ``rank`` (pushed) and
    ``residual`` (received, not pushed yet) per page; ``pushes`` counts the pushes."""

    def __init__(self, g: Crawlable, hosts: np.ndarray | None = None, push: bool = True) -> None:
        self.g = g
        #: Pushes through fetched pages (without: :func:`link_votes`).
        self.push = push
        #: With ``hosts``: the rank each host received over links from other hosts.
        self.hosts = hosts
        self.inflow = np.zeros(1 if hosts is None else int(hosts.max()) + 1)
        self.rank = np.zeros(g.n)
        self.residual = np.zeros(g.n)
        self.fetched = np.zeros(g.n, bool)
        #: Each page's fewest links from the seed over fetched pages (``depth_votes``).
        self.depth = np.full(g.n, 1 << 40, np.int64)  # (not reached yet)
        self.pushes = 0
        self._due: list[tuple[float, int]] = []  # fetched pages with residual above THETA
        #: Called with each unfetched page whose score rose.
        self.raised: Callable[[int], None] = lambda i: None

    def fetch(self, i: int) -> None:
        self.fetched[i] = True
        self.residual[i] += 1.0 - ALPHA
        self._push(i)
        due, r = self._due, self.residual
        while due and self.push:
            k, v = heapq.heappop(due)
            if -k == r[v] and r[v] > THETA:
                self._push(v)

    def _push(self, v: int) -> None:
        r, fetched = self.residual, self.fetched
        got, r[v] = r[v], 0.0
        self.rank[v] += got
        self.pushes += 1
        kids = self.g.kids(v)
        if not kids:
            return
        share = ALPHA * got / len(kids)
        hosts = self.hosts
        below = self.depth[v] + 1
        for c in kids:
            if below < self.depth[c]:
                self.depth[c] = below
            r[c] += share
            if hosts is not None and hosts[c] != hosts[v]:
                self.inflow[hosts[c]] += share
            if fetched[c]:
                if self.push and r[c] > THETA:
                    heapq.heappush(self._due, (-r[c], c))
            else:
                self.raised(c)


def link_rank(g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None) -> list[int]:
    """The unfetched page with the highest link rank; with ``hosts``, the hosts take turns
    (see :func:`host_turns`)."""
    est = LinkRank(g)
    r = est.residual
    out = host_turns(seed, stop, hosts, lambda i: -r[i], est)
    link_rank.pushes = est.pushes / max(1, len(out))  # type: ignore[attr-defined]
    return out


def link_votes(g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None) -> list[int]:
    """:func:`link_rank` without pushes through fetched pages (see the module docstring)."""
    est = LinkRank(g, push=False)
    r = est.residual
    out = host_turns(seed, stop, hosts, lambda i: -r[i], est)
    link_votes.pushes = est.pushes / max(1, len(out))  # type: ignore[attr-defined]
    return out


def depth_votes(g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None) -> list[int]:
    """:func:`link_votes`, each page's votes discounted by ``BETA`` per link between it and the
    seed (its fewest, over fetched pages): an endless calendar gets deeper at every fetch in
    it."""
    est = LinkRank(g, push=False)
    est.depth[seed] = 0
    r, depth = est.residual, est.depth
    out = host_turns(seed, stop, hosts, lambda i: -r[i] * BETA ** depth[i], est)
    depth_votes.pushes = est.pushes / max(1, len(out))  # type: ignore[attr-defined]
    return out


def host_bfs(g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None) -> list[int]:
    """Breadth-first within each host, the hosts taking turns: what host turns alone bring."""
    est = Discovery(g)
    est.order[seed] = 0.0
    return host_turns(seed, stop, hosts, lambda i: est.order[i], est)


class Discovery:
    """Pages in the order they were discovered (``order``: a count, -1 not yet)."""

    def __init__(self, g: Crawlable) -> None:
        self.g = g
        self.order = np.full(g.n, -1.0)
        self.fetched = np.zeros(g.n, bool)
        self.count = 0.0
        self.raised: Callable[[int], None] = lambda i: None

    def fetch(self, i: int) -> None:
        self.fetched[i] = True
        for j in self.g.kids(i):
            if self.order[j] < 0:
                self.count += 1
                self.order[j] = self.count
                self.raised(j)


def weighted_link_rank(
    g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None
) -> list[int]:
    """As :func:`link_rank` with hosts, a host's turns in proportion to the square root of the
    link rank it received from other hosts (plus ``INFLOW_FLOOR``): a host that only links to
    itself (a trap) gets few turns."""
    est = LinkRank(g, hosts)
    r = est.residual

    def weight(h: int) -> float:
        return float(np.sqrt(INFLOW_FLOOR + est.inflow[h]))

    out = host_turns(seed, stop, hosts, lambda i: -r[i], est, weight)
    weighted_link_rank.pushes = est.pushes / max(1, len(out))  # type: ignore[attr-defined]
    return out


def host_turns(
    seed: int,
    stop: int,
    hosts: np.ndarray | None,
    key: Callable[[int], float],
    est: LinkRank | Discovery,
    weight: Callable[[int], float] | None = None,
) -> list[int]:
    """Fetch order: the host with the fewest fetches so far among those with a page to fetch
    (ties: the lower host id), then its page of lowest ``key`` (a key that only falls while
    the page waits); ``est.fetch(i)`` tells of each fetch, ``est.raised(i)`` is called back with
    every page whose key fell. ``hosts`` None: one host. With ``weight``, turns in proportion to
    each host's weight (stride scheduling: a fetch moves the host's pass on by 1 / weight; a
    host that comes, or comes back, starts at the pass of the last turn)."""
    host = (lambda i: 0) if hosts is None else (lambda i: int(hosts[i]))
    pages: dict[int, list[tuple[float, int]]] = {}
    passes: dict[int, float] = {}
    turns: list[tuple[float, int]] = []  # (pass, host) of hosts that may have pages
    now = 0.0

    def raised(i: int) -> None:
        h = host(i)
        heap = pages.setdefault(h, [])
        if not heap:
            p = passes.get(h, 0.0)
            if weight is not None:
                p = passes[h] = max(p, now)
            heapq.heappush(turns, (p, h))
        heapq.heappush(heap, (key(i), i))

    est.raised = raised
    raised(seed)
    out: list[int] = []
    while turns and len(out) < stop:
        p, h = heapq.heappop(turns)
        now = max(now, p)
        heap = pages[h]
        while heap:
            k, i = heapq.heappop(heap)
            if not est.fetched[i] and k == key(i):
                break
        else:
            continue  # no page left: back in turn when one is raised
        out.append(i)
        passes[h] = p + (1.0 if weight is None else 1.0 / max(weight(h), 1e-12))
        if heap:
            heapq.heappush(turns, (passes[h], h))
        est.fetch(i)
    return out


def opic(
    g: Crawlable,
    seed: int,
    stop: int,
    hosts: np.ndarray | None = None,
    order: str = "web",
    continuous: bool = False,
    at_once: int = 1,
    rng: random.Random | None = None,
) -> list[int]:
    """The plugin's one-pass order (``OPIC_ORDER``): its crawl code (frontier, engine, virtual
    page), in memory, each host a download slot; without ``hosts``, one slot. With
    ``continuous``, the order of the first fetches of a continuous crawl that refetches by
    cash, its defaults otherwise (the pages refetched are visited again over their links: the
    graph does not change). ``at_once``: requests out at once (as Scrapy's
    ``CONCURRENT_REQUESTS``; a slot full at :data:`PER_SLOT`), the one answered next drawn
    by ``rng`` among them; 1: each page visited before the next pop (no slot ever full)."""
    from scrapy_opic._backends.store import MemoryStore
    from scrapy_opic._state import open_crawl
    from scrapy_opic.opic.config import CrawlConfig
    from scrapy_opic.opic.constants import NEEDS_PAYLOAD
    from scrapy_opic.opic.contract import Entry, Link

    never = 10**12
    config = CrawlConfig(order=order)
    if continuous:  # (OPIC_CONTINUOUS's defaults: refresh 1, the adaptive window)
        config = config.replace(
            continuous=True, refresh=1.0, window="adaptive:30", discovery=0.5, refetch="cash"
        )
    crawl = open_crawl(
        MemoryStore(), config, {"spider": "bench"}, "", commit_visits=never, commit_seconds=never
    )
    slot = (lambda i: "") if hosts is None else (lambda i: int(hosts[i]))
    crawl.schedule([Entry(seed, str(seed), slot=slot(seed), payload="r", seed=True)])
    out: list[int] = []
    seen: set[int] = set()
    out_now: list = []  # (leases whose answer has not come yet)
    load: Counter = Counter()  # (of each slot)
    while len(out) < stop:
        while len(out_now) < at_once:
            full = [h for h, n in load.items() if n >= PER_SLOT] if at_once > 1 else ()
            lease = crawl.pop(full)
            if lease is None:
                break
            out_now.append(lease)
            load[lease.slot] += 1
            if lease.key not in seen:
                seen.add(lease.key)
                out.append(lease.key)
        if not out_now:
            break
        lease = out_now.pop(rng.randrange(len(out_now)) if rng is not None else 0)
        load[lease.slot] -= 1
        kids = g.kids(lease.key)
        visit = crawl.visit(lease, [Link(j, str(j)) for j in kids])
        wanted = [j for j, code in zip(kids, visit.codes) if code == NEEDS_PAYLOAD]
        crawl.schedule([Entry(j, str(j), slot=slot(j), payload="r") for j in wanted])
    return out[:stop]


def opic_cash(g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None) -> list[int]:
    """The plugin's order by cash alone (``OPIC_ORDER = "cash"``, the paper's Greedy)."""
    return opic(g, seed, stop, hosts, "cash")


def opic_continuous(
    g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None
) -> list[int]:
    """The first fetches of the plugin's continuous crawl (``OPIC_CONTINUOUS``), by default in
    the web order in its discovery turns (half its pops while pages wait for a first fetch)."""
    return opic(g, seed, stop, hosts, continuous=True)


def opic_continuous_cash(
    g: Crawlable, seed: int, stop: int, hosts: np.ndarray | None = None
) -> list[int]:
    """The same by cash alone (``OPIC_ORDER = "cash"``)."""
    return opic(g, seed, stop, hosts, "cash", continuous=True)


ORDERS: dict[str, Order] = {
    "bfs": bfs,
    "backlinks": backlinks,
    "opic_cash": opic_cash,
    "opic": opic,
    "opic_continuous_cash": opic_continuous_cash,
    "opic_continuous": opic_continuous,
    "partial_pr": partial_pagerank,
    "link_rank": link_rank,
    "link_votes": link_votes,
    "depth_votes": depth_votes,
    "host_bfs": host_bfs,
    "weighted_link_rank": weighted_link_rank,
}


def host_graph(n: int, seed: int = 0) -> tuple[Graph, np.ndarray]:
    """A web-like graph of about ``n`` pages on hosts of Zipf sizes, pages of a host
    consecutive: each page links to its host's home page (the host's first page), to one of the
    host's section pages (its next ~sqrt(size) pages), to a few pages of its host near it, and
    with some chance to any page of another host, the host drawn by popularity (Zipf).
    Returns the graph and each page's host."""
    rng = np.random.default_rng(seed)
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(int(min(5000, max(3, rng.pareto(1.2) * 8))))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    total = int(starts[-1])
    hosts = len(sizes)
    popularity = 1.0 / np.arange(1, hosts + 1) ** 1.1
    rng.shuffle(popularity)
    popularity /= popularity.sum()
    host_of = np.repeat(np.arange(hosts), sizes)
    base = starts[host_of]
    size = np.asarray(sizes)[host_of]
    page = np.arange(total)
    srcs, dsts = [page], [base]  # the home page
    sections = np.maximum(1, np.sqrt(size).astype(np.int64))
    srcs.append(page)
    dsts.append(base + 1 + rng.integers(0, np.maximum(1, sections), total) % size)
    for _ in range(4):  # pages near it: a listing's neighbours
        srcs.append(page)
        near = (page - base + rng.integers(-20, 21, total)) % size
        dsts.append(base + near)
    for _ in range(2):  # across hosts: any page of a host drawn by popularity
        go = rng.random(total) < 0.15
        target_host = rng.choice(hosts, size=int(go.sum()), p=popularity)
        srcs.append(page[go])
        dsts.append(starts[target_host] + rng.integers(0, np.asarray(sizes)[target_host]))
    return from_edges(np.concatenate(srcs), np.concatenate(dsts), total), host_of


def with_trap(
    graph: Graph, host_of: np.ndarray, size: int, sources: np.ndarray
) -> tuple[Graph, np.ndarray]:
    """``graph`` and one more host of ``size`` pages: an endless calendar (day ``d`` links to
    the next days and months, never out of the host), its first day linked to from the pages
    ``sources``."""
    n = graph.n
    day = np.arange(size)
    src, dst = [graph.sources()], [graph.indices.astype(np.int64)]
    for step in CALENDAR_STEPS:
        ok = day + step < size
        src.append(n + day[ok])
        dst.append(n + day[ok] + step)
    src.append(np.asarray(sources, dtype=np.int64))
    dst.append(np.full(len(sources), n))
    hosts = np.concatenate([host_of, np.full(size, host_of.max() + 1)])
    return from_edges(np.concatenate(src), np.concatenate(dst), n + size), hosts


#: The orders of the trap's tables.
TRAP_ORDERS = (
    "bfs", "opic_cash", "opic", "opic/its hosts", "opic_continuous_cash",
    "opic_continuous/its hosts", "link_rank", "link_rank/its hosts", "link_votes/its hosts",
    "depth_votes/its hosts", "weighted_link_rank/its hosts",
)  # fmt: skip


def trap_shares(
    g: Crawlable,
    hosts: np.ndarray,
    seeds: list[int],
    fraction: float,
    first: int,
    names: Sequence[str] = TRAP_ORDERS,
):
    """The share of each order's first ``fraction`` of fetches that went to pages ``>= first``
    (the trap), by seed."""
    stop = int(first * fraction)
    rows = []
    for seed in seeds:
        row: list = [seed]
        for name in names:
            order_name, _, hosting = name.partition("/")
            order = ORDERS[order_name](g, seed, stop, hosts if hosting else None)
            row.append(float(np.mean(np.asarray(order) >= first)))
        rows.append(row)
        print(g.name, seed, "trap", row, flush=True)
    rows.append(["mean", *(float(np.mean([r[k] for r in rows])) for k in range(1, len(names) + 1))])
    return ["seed", *names], rows


def site_trap(n: int = 1000, days: int = 20_000) -> tuple[list[str], list]:
    """A site's own calendar: the share of each order's first ``n`` fetches that went to the
    calendar of ``benchmarks.crawl_evidence``'s trap site (``n`` pages, every one linking to
    day 0; one host), from page 0."""
    g = Crawlable(trap_graph(n, days)[1], "site trap")
    names = ["omniscient", "bfs", "opic_cash", "opic", "link_rank", "link_votes", "depth_votes"]
    row: list = []
    for name in names:
        if name == "omniscient":
            order = list(np.argsort(-g.pr, kind="stable")[:n])
        else:
            order = ORDERS[name](g, 0, n, None)
        row.append(float(np.mean(np.asarray(order[:n]) >= n)))
    return names, [row]


def reaching_seeds(g: Crawlable, count: int, stop: int) -> list[int]:
    """Pages drawn at random (a fixed draw) from which breadth-first reaches ``stop`` pages."""
    seeds: list[int] = []
    for i in np.random.default_rng(1).permutation(g.n):
        if len(bfs(g, int(i), stop)) >= stop:
            seeds.append(int(i))
            if len(seeds) == count:
                break
    return seeds


def measure(g: Crawlable, seeds: list[int], fraction: float, hostings: dict[str, np.ndarray]):
    """Every order from every seed; ``hostings``: the host of each page, by the name of the
    way the graph's pages were given hosts."""
    stop = int(g.n * fraction)
    rows, data = [], []
    turns = (
        "opic", "opic_continuous", "host_bfs", "link_rank", "link_votes", "depth_votes",
        "weighted_link_rank",
    )  # fmt: skip
    only_with_hosts = ("host_bfs", "weighted_link_rank")
    columns = [
        *(o for o in ORDERS if o not in only_with_hosts),
        *(f"{o}/{h}" for h in hostings for o in turns),
    ]
    for seed in seeds:
        best = g.pr[omniscient(g, seed, stop)].sum()
        got: dict[str, float] = {"omniscient_share": float(best)}
        seconds: dict[str, float] = {}
        for name in columns:
            order_name, _, hosting = name.partition("/")
            fn, hosts = ORDERS[order_name], hostings.get(hosting)
            t0 = time.perf_counter()
            order = fn(g, seed, stop, hosts)
            seconds[name] = time.perf_counter() - t0
            got[name] = float(g.pr[order].sum() / best)
            if fn in (link_rank, link_votes, depth_votes, weighted_link_rank):
                got[f"{name} pushes/fetch"] = float(fn.pushes)  # type: ignore[attr-defined]
        data.append({"seed": seed, "ratios": got, "seconds": seconds})
        rows.append([seed, *(got[c] for c in columns), best])
        print(g.name, seed, {k: round(v, 3) for k, v in got.items()}, flush=True)
    means = [float(np.mean([d["ratios"][c] for d in data])) for c in columns]
    rows.append(["mean", *means, float(np.mean([d["ratios"]["omniscient_share"] for d in data]))])
    header = ["seed", *columns, "omniscient (share)"]
    return header, rows, data


def spread(ratios: Sequence[float]) -> str:
    """The range of a seed's ratios over crawls or draws, as its page shows it."""
    return f"{min(ratios):.3f}-{max(ratios):.3f}"


def concurrent_draws(
    g: Crawlable, measured: list[dict], fraction: float, hostings: dict[str, np.ndarray], draws: int
) -> tuple[list[str], list[list], list[dict]]:
    """The plugin's order (``opic/H``) as a crawl through Scrapy sees it: :data:`AT_ONCE`
    requests out at once, the next answer drawn at random among them, ``draws`` draws (seeds
    0, 1, ...) per seed and hosting, beside the order one page at a time (``measured``: what
    :func:`measure` found). A draw is what a crawl through Scrapy is: which responses come
    back first moves what the crawl knows when it chooses."""
    stop = int(g.n * fraction)
    rows, data = [], []
    for got in measured:
        seed, best = got["seed"], got["ratios"]["omniscient_share"]
        for name, hosts in hostings.items():
            ratios = [
                float(g.pr[opic(g, seed, stop, hosts, at_once=AT_ONCE, rng=random.Random(r))]
                      .sum() / best)
                for r in range(draws)
            ]  # fmt: skip
            data.append({"seed": seed, "hosts": name, "ratios": ratios})
            one = got["ratios"][f"opic/{name}"]
            rows.append([seed, name, one, float(np.median(ratios)), spread(ratios)])
            print(g.name, seed, name, "draws", [round(x, 3) for x in ratios], flush=True)
    for name in hostings:
        mine = [r for r in rows if r[1] == name]
        rows.append(["mean", name, *(float(np.mean([r[k] for r in mine])) for k in (2, 3)), ""])
    head = ["seed", "hosts", "one at a time", f"{AT_ONCE} at once (median)"]
    head.append(f"{AT_ONCE} at once (range of {draws})")
    return head, rows, data


def fleet_crawl(start_url: str, workdir: Path, processes: int, redis_url: str, **options) -> None:
    """One crawl by ``processes`` crawl runners at once, sharing it on Redis (a key of its own,
    deleted after), each closing after ``CLOSESPIDER_PAGECOUNT`` pages of its own."""
    import redis

    key = f"opic-web-order-{uuid.uuid4().hex[:8]}"
    options |= {"spider": "site", "OPIC_STORE": "redis", "OPIC_REDIS_URL": redis_url}
    options["OPIC_REDIS_KEY"] = key
    runs = [start_crawl(start_url, "addon", workdir / f"p{p}", **options) for p in range(processes)]
    codes = [r.wait() for r in runs]
    client = redis.Redis.from_url(redis_url)
    for k in client.scan_iter(match=f"{key}*", count=1000):
        client.delete(k)
    if any(codes):
        raise RuntimeError(f"a process of the fleet failed: exit codes {codes}")


def through_scrapy(
    g: Crawlable,
    best: dict[int, float],
    offline: dict[int, tuple[float, float]],
    fraction: float,
    hosts: int,
    delay: float,
    fleet: int = 0,
    redis_url: str = "",
    concurrency: int = 16,
    continuous: bool = False,
    runs: int = 1,
) -> tuple[list[str], list[list], list[dict]]:
    """The plugin's order through Scrapy, from the server's access log (see the module
    docstring): its ratio to frontier-omniscient's share ``best[seed]``, by seed, beside the
    ``offline`` ratios of breadth-first and partial PageRank; with ``fleet``, that many
    processes share the crawl on the Redis server ``redis_url``; ``concurrency``: each
    process's ``CONCURRENT_REQUESTS``; ``continuous``: a continuous crawl (its defaults), the
    order its first fetches, stopped after 3 fetches per page of the share measured; ``runs``:
    crawls per seed, the median ratio the figure (which responses come back first moves a
    crawl's order, so one crawl of a seed is one draw of it)."""
    stop = int(g.n * fraction)
    block = -(-g.n // hosts)
    names = tuple(f"127.0.{h // 250}.{h % 250 + 1}" for h in range(hosts))
    site = Site(g.graph, host_of=lambda i: names[i // block], addresses=names)
    rows, data = [], []
    with tempfile.TemporaryDirectory() as tmp, site:
        for seed, run in itertools.product(best, range(runs)):
            site.access_log.clear()
            work = Path(tmp) / f"{seed}-{run}"
            t0 = time.perf_counter()
            options = {"allowed": list(names), "CONCURRENT_REQUESTS": concurrency}
            # (A continuous crawl refetches too: enough fetches for the first ones measured.)
            fetches = 3 * stop if continuous else stop
            options |= {"DOWNLOAD_DELAY": delay, "CLOSESPIDER_PAGECOUNT": fetches}
            if continuous:
                options["OPIC_CONTINUOUS"] = True
            if fleet:  # (each process's share, and a little more: the first pages count)
                options["CLOSESPIDER_PAGECOUNT"] = -(-fetches // fleet) + 100
                fleet_crawl(site.url(seed), work, fleet, redis_url, **options)
            else:
                crawl(site.url(seed), "opic", work, spider="site", **options)
            seconds = time.perf_counter() - t0
            order: list[int] = []
            seen: set[int] = set()
            for _host, path, _start, _end in sorted(site.access_log, key=lambda e: e[2]):
                if path.startswith("/p/"):
                    i = int(path[3:].removesuffix(".html"))
                    if i not in seen:
                        seen.add(i)
                        order.append(i)
            if len(order) < stop:
                raise RuntimeError(f"seed {seed}: {len(order)} pages fetched, not {stop}")
            ratio = float(g.pr[order[:stop]].sum() / best[seed])
            data.append(
                {"seed": seed, "run": run, "opic": ratio, "pages": len(order), "seconds": seconds}
            )
            print(g.name, seed, "through scrapy", data[-1], flush=True)
    for seed in best:
        mine = [d for d in data if d["seed"] == seed]
        ratios = [d["opic"] for d in mine]
        pages = int(np.median([d["pages"] for d in mine]))
        seconds = float(np.median([d["seconds"] for d in mine]))
        rows.append(
            [seed, float(np.median(ratios)), spread(ratios), *offline[seed], pages, seconds]
        )
    means = [float(np.mean([r[k] for r in rows])) for k in (1, 3, 4)]
    rows.append(["mean", means[0], "", *means[1:], "", ""])
    head = ["seed", "opic (median)", f"opic (range of {runs})", "bfs (offline)"]
    head += ["partial_pr (offline)", "pages fetched", "seconds"]
    return head, rows, data


def main(argv: list[str] | None = None) -> int:
    global BETA  # (--beta: read by depth_votes)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default=str(REAL_GRAPH), help="an edge list; '': none")
    p.add_argument("--seeds", default="247028,263046,162973,265611")
    p.add_argument("--fraction", type=float, default=0.1)
    p.add_argument("--site-size", default="1024", help="comma-separated block sizes")
    p.add_argument("--beta", type=float, default=BETA, help="depth_votes' discount per link")
    p.add_argument("--generated", type=int, default=100_000, help="0: no generated graph")
    p.add_argument("--generated-seeds", type=int, default=3)
    p.add_argument("--scrapy", type=int, default=0, help="hosts of a crawl through Scrapy")
    p.add_argument("--delay", type=float, default=0.0, help="its DOWNLOAD_DELAY")
    p.add_argument("--fleet", type=int, default=0, help="processes sharing it on Redis")
    p.add_argument("--concurrency", type=int, default=16, help="CONCURRENT_REQUESTS of each")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="the fleet's Redis")
    p.add_argument("--continuous", action="store_true", help="a continuous crawl through Scrapy")
    p.add_argument("--runs", type=int, default=1, help="crawls through Scrapy per seed: median")
    p.add_argument("--draws", type=int, default=0, help="draws of the order with concurrency")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    BETA = args.beta
    t0 = time.perf_counter()
    site_sizes = [int(s) for s in args.site_size.split(",") if s]
    sections, data = [], {}
    graphs = []
    if args.graph:
        g = Crawlable(load_edge_list(args.graph), Path(args.graph).name.split(".")[0])
        ids = np.arange(g.n)
        blocks = {f"{b} ids": ids // b for b in site_sizes}
        blocks["16 hosts"] = ids // -(-g.n // 16)  # (as --scrapy 16 serves them)
        graphs.append((g, [int(s) for s in args.seeds.split(",")], blocks))
    if args.generated:
        graph, host_of = host_graph(args.generated)
        g = Crawlable(graph, f"generated-{args.generated}")
        seeds = reaching_seeds(g, args.generated_seeds, int(g.n * args.fraction))
        sixteen = np.arange(g.n) // -(-g.n // 16)
        graphs.append((g, seeds, {"its hosts": host_of, "16 hosts": sixteen}))
        top = np.argsort(-g.pr)[:10]
        trapped, trap_hosts = with_trap(graph, host_of, graph.n // 5, top)
        head, lines = trap_shares(
            Crawlable(trapped, "trapped"), trap_hosts, seeds, args.fraction, graph.n
        )
        head2, lines2 = site_trap()
        data["site trap"] = dict(zip(head2, lines2[0]))
        trap_section = (
            f"## A trap: generated-{args.generated} and an endless calendar of "
            f"{graph.n // 5:,} pages\n\nThe share of the first {args.fraction:.0%} of fetches "
            "(of the graph without the calendar) that went to the calendar, linked to from the "
            "graph's 10 pages of highest PageRank; the calendar a host of its own.\n\n"
            + table(head, lines)
            + "\n\nA site's own calendar, on its one host: `benchmarks.crawl_evidence`'s "
            "trap site (1,000 pages, each linking to the first day), the share of the first "
            "1,000 fetches that went to the calendar (omniscient: by the PageRank of the site "
            "and the calendar cut at 20,000 days).\n\n" + table(head2, lines2)
        )
    for g, seeds, hostings in graphs:
        header, rows, d = measure(g, seeds, args.fraction, hostings)
        data[g.name] = d
        sections.append(f"## {g.name}: {g.n:,} pages, {g.graph.n_edges:,} links\n\n"
                        + table(header, rows))  # fmt: skip
        if args.draws:
            head, lines, got = concurrent_draws(g, d, args.fraction, hostings, args.draws)
            data[f"{g.name} draws"] = got
            sections.append(
                f"## {g.name}: the plugin's order with {AT_ONCE} requests at once\n\n"
                f"Ratio to frontier-omniscient's share, one page at a time (as above) and with "
                f"{AT_ONCE} requests out at once ({PER_SLOT} per host), the next answer drawn at "
                f"random: {args.draws} draws per seed.\n\n" + table(head, lines)
            )
        if args.scrapy:
            best = {x["seed"]: x["ratios"]["omniscient_share"] for x in d}
            offline = {x["seed"]: (x["ratios"]["bfs"], x["ratios"]["partial_pr"]) for x in d}
            head, lines, got = through_scrapy(
                g, best, offline, args.fraction, args.scrapy, args.delay, args.fleet,
                args.redis_url, args.concurrency, args.continuous, args.runs,
            )  # fmt: skip
            data[f"{g.name} through scrapy"] = got
            fleet = f", {args.fleet} processes on Redis" if args.fleet else ""
            fleet += f", CONCURRENT_REQUESTS {args.concurrency} each"
            fleet += ", continuous (its first fetches)" if args.continuous else ""
            runs = f" The median of {args.runs} crawls per seed." if args.runs > 1 else ""
            sections.append(
                f"## {g.name} through Scrapy: {args.scrapy} hosts, DOWNLOAD_DELAY "
                f"{args.delay}{fleet}\n\nThe plugin's order, ratio to frontier-omniscient's "
                f"share.{runs}\n\n" + table(head, lines)
            )
    if args.generated:
        sections.append(trap_section)
    summary = (
        f"The PageRank share of the first {args.fraction:.0%} of each graph's pages fetched, "
        "as a ratio to frontier-omniscient's share (last column); `pushes/fetch` in the JSON. "
        "`X/H`: hosts H take turns (blocks of consecutive ids, 16 equal blocks, or the "
        f"generated graph's own hosts). Link rank: ALPHA={ALPHA}, THETA={THETA}; "
        f"depth_votes: BETA={BETA}."
    )
    text = page("Crawl order on web graphs", summary, *sections)
    text += f"\n_Total time: {time.perf_counter() - t0:.0f} s._\n"
    stem = f"web_order_scrapy{args.scrapy}_delay{args.delay:g}" if args.scrapy else "web_order"
    if args.scrapy and args.fleet:
        stem += f"_fleet{args.fleet}"
    if args.scrapy and args.concurrency != 16:
        stem += f"_c{args.concurrency}"
    if args.scrapy and args.continuous:
        stem += "_continuous"
    if args.scrapy and args.runs > 1:
        stem += f"_runs{args.runs}"
    if args.draws:
        stem += f"_draws{args.draws}"
    write_results(stem, data, text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
