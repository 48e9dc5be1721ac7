"""A crawl process on the frontier API alone, for the SIGKILL test of a sharded crawl
(tests/test_sharded.py): crawls ``site_graph(N, SEED)`` (one pass) through the sharded frontier
at URL under KEY, as a Scrapy process would (pop, a fetch that takes a moment, visit, upkeep),
until the crawl has nothing pending. Between a visit and the transfers it wrote it waits a
moment, so that a kill often falls there.

    python tests/shard_worker.py URL KEY SHARDS N SEED
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scrapy_opic.backends.sharded import ShardedRedisFrontier  # noqa: E402
from scrapy_opic.opic.frontier import Entry, Link  # noqa: E402
from tests.sites import site_graph  # noqa: E402

HOSTS = 6
FETCH = 0.02  # seconds a "fetch" takes
LEASE = 0.5


def url(i: int) -> str:
    return f"http://h{i % HOSTS}.example/p/{i}"


def key(i: int) -> bytes:
    return hashlib.sha1(url(i).encode()).digest()


def main() -> None:
    server, crawl_key, shards, n, seed = sys.argv[1:6]
    g = site_graph(int(n), seed=int(seed))
    ids = {key(i): i for i in range(g.n)}
    f = ShardedRedisFrontier.connect(server, crawl_key, int(shards), lease=LEASE)
    f.open(epsilon=0.15, refresh=1.0)
    f.schedule([Entry(key(0), url(0), 0, "h0", b"r")])
    apply = f._apply

    def slow_apply(*args, **kw):
        time.sleep(0.005)  # (a kill often falls between a visit and its transfers)
        return apply(*args, **kw)

    f._apply = slow_apply
    leases = []
    last = 0.0
    while True:
        now = time.monotonic()
        if now - last > LEASE / 3:
            f.maintain(leases)
            last = now
        lease = f.pop()
        if lease is None:
            if not f.has_pending():
                break
            time.sleep(0.02)
            continue
        leases = [lease]
        time.sleep(FETCH)
        i = ids[lease.key]
        links = [
            Link(key(int(j)), url(int(j)), slot=f"h{int(j) % HOSTS}", payload=b"r")
            for j in g.children(i)
        ]
        f.visit(lease, links)
        leases = []
    f.close([])


if __name__ == "__main__":
    main()
