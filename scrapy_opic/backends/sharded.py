"""One OPIC crawl over several Redis partitions (shards of a Redis Cluster): the
:class:`~scrapy_opic.opic.frontier.Frontier` contract over P :class:`RedisFrontier` partitions.

Layout. Partition ``k`` of ``P`` is a whole frontier under the key ``<key>:<k>`` (hash tag
``{<key>:<k>}``, so on a Redis Cluster the partitions spread over the shards by their tags), with
the pages whose URL's host hashes to ``k`` (:func:`partition_of`). Partitioning by host, not by
page, keeps a host's pages, their download slot (Scrapy's slot is the host) and the slot's
fleet-politeness counters in one partition: a pop there stays exact among the slots with room,
and per-host politeness stays fleet-wide. (A slot that spans hosts, set with the request's
``download_slot`` meta or ``CONCURRENT_REQUESTS_PER_IP``, has its limits kept per partition.)
Links within a host, most links, stay within a partition. The crawl's own records (its
partition count, its metadata, time series and the processes that joined) live under
``<key>``, where readers find it: ``<key>:shards`` holds ``P``.

Money between partitions. A visit runs on its page's partition and pays the links there; the
shares of links into other partitions, a redirect's cash to a target in another partition and
the partition's virtual cash (below) are written, in the same atomic call that takes them, as
entries of the partition's outbox. The process then applies each entry on its destination,
which credits and files the pages and records the entry's id so that applying it twice does
nothing, and acknowledges it on the source in its next call there. An entry older than a lease
is replayed by any process's upkeep: a process killed between a visit and its transfers loses
nothing. Invariant: all cash = the partitions' pages and virtual pages + their outboxes = 1.

One virtual page in P parts. Each partition's virtual page collects its own income (the
epsilon share, dangling pages, closed pages). A process sends it, every few visits on the
partition and at each upkeep, to every partition in proportion to their live pages (and, for
the ``1 - refresh`` share, to their pages never fetched), with the whole amount as teleport
credit to each, so the payout stays uniform over the crawl's pages as with one virtual page.
Each partition counts in G the cash its own pages absorbed, and sends it with its virtual
cash: a partition's clock (what windows, visit times and the received-credit moments read) is
its G plus the others' as they last sent it, the crawl's G but for what the others absorbed
since.

Greedy over partition heads. Every pop, visit and apply reply carries its partition's head
(best tier and true cash among slots with room); a process pops from the richest head it knows,
and reads every head again in one pipeline when its view is older than :data:`HEAD_TTL` or all
its heads are empty. Exact within a partition; across partitions, greedy to within what other
processes changed since the process last looked.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ..opic.constants import (
    DEAD,
    DUPLICATE,
    FETCHED,
    FILTERED,
    FORBIDDEN,
    LOCAL,
    NEEDS_PAYLOAD,
    VISIT_DECAY,
)
from ..opic.frontier import Entry, Lease, Link, Visit
from . import StoreError
from .redis import (
    POLL,
    SCALARS,
    RedisFrontier,
    RedisSnapshot,
    _unpack_globals,
    entries_of,
    open_client,
    parse_head,
    status_figures,
    window_params,
)

#: Seconds a process trusts its view of the other partitions' heads before reading them again
#: (every reply of a partition carries its head: this bounds what other processes changed).
HEAD_TTL = 0.5
#: A process sends a partition's virtual cash with every this many of its visits there.
SEND_EVERY = 8
#: Outbox entries replayed per partition per upkeep.
REPLAY_BATCH = 200


def partition_of(url: str, parts: int) -> int:
    """The partition of a page: a hash of its URL's host (BLAKE2b, the same in every process and
    every Python, unlike ``hash``; not CRC-32, whose remainders by small numbers cluster for
    similar names such as www1, www2...), modulo ``parts``. A URL without a host goes by its
    whole text."""
    try:
        host = urlsplit(url).hostname or url
    except ValueError:  # (a malformed URL, e.g. a bad IPv6 literal: its text)
        host = url
    digest = hashlib.blake2b(host.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % parts


def shards_of(client: Any, key: str) -> int | None:
    """The partition count of the crawl under ``key`` (``None``: not a sharded crawl)."""
    raw = client.get("{" + key + "}:shards")
    return None if raw is None else int(raw)


class ShardedRedisFrontier:
    """A crawl's OPIC frontier over ``shards`` Redis partitions (see the module docstring).

    :param client: a ``redis.Redis`` or ``redis.RedisCluster`` client (``decode_responses``
        off). On a cluster the partitions' hash tags spread them over its shards.
    :param key: the crawl's name, as for :class:`RedisFrontier`.
    :param shards: the number of partitions (2 or more; a crawl keeps the number it started
        with).
    Other parameters as :class:`RedisFrontier`'s.
    """

    shared = True

    def __init__(
        self,
        client: Any,
        key: str,
        shards: int,
        lease: float = 60.0,
        encode: Callable[[Any], bytes | None] | None = None,
        series_seconds: float = 10.0,
        location: str | None = None,
    ) -> None:
        if shards < 2:
            raise ValueError(f"a sharded crawl needs 2 or more partitions, not {shards!r}")
        self.client = client
        self.key = key
        self.n_parts = shards
        #: The crawl's records (metadata, series, processes), under ``key`` itself.
        self.home = RedisFrontier(client, key, lease, encode, series_seconds, location)
        self.parts = [
            RedisFrontier(client, f"{key}:{k}", lease, encode, series_seconds, location)
            for k in range(shards)
        ]
        known: set[bytes] = set()
        self._tag_part = {part._tag: k for k, part in enumerate(self.parts)}
        for k, part in enumerate(self.parts):
            part.part, part.parts = k, shards
            part.worker = self.home.worker
            part._known = known  # (one view of the pages this process knows are not new)
        self.location = location
        self.lease_ms = self.home.lease_ms
        self.maintain_interval = self.home.maintain_interval
        self.continuous = False
        self._discovery = 0.0
        self._closed_links_virtual = False
        self._ready: Callable[[], bool] = lambda: True
        self.wake_in: float | None = None
        #: Per partition, what this process last read of it: live and never-fetched pages,
        #: virtual cash; and when it read every head last.
        self._counts: list[tuple[int, int]] = [(0, 0)] * shards
        self._vcash = [0.0] * shards
        self._heads_at = float("-inf")
        self._waits: list[float] = []
        self._visits = [0] * shards
        self._figures: dict[str, float] = {}
        self._round_trips = 0
        self._upkeeps = 0

    @classmethod
    def connect(cls, url: str, key: str, shards: int, **kw: Any) -> ShardedRedisFrontier:
        kw.setdefault("location", f"{url}#{key}")
        return cls(open_client(url), key, shards, **kw)

    # -- settings shared with the partitions ---------------------------------------------------
    @property
    def worker(self) -> str:
        return self.home.worker

    @property
    def round_trips(self) -> int:
        return self._round_trips + self.home.round_trips + sum(p.round_trips for p in self.parts)

    @property
    def discovery(self) -> float:
        return self._discovery

    @discovery.setter
    def discovery(self, value: float) -> None:
        self._discovery = value
        for part in self.parts:
            part.discovery = value

    @property
    def closed_links_virtual(self) -> bool:
        return self._closed_links_virtual

    @closed_links_virtual.setter
    def closed_links_virtual(self, value: bool) -> None:
        self._closed_links_virtual = value
        for part in self.parts:
            part.closed_links_virtual = value

    @property
    def ready(self) -> Callable[[], bool]:
        return self._ready

    @ready.setter
    def ready(self, value: Callable[[], bool]) -> None:
        self._ready = value
        for part in self.parts:
            part.ready = value

    def part_of(self, url: str) -> int:
        """The partition of a page, by its URL's host."""
        return partition_of(url, self.n_parts)

    def part_of_lease(self, lease: Lease) -> int:
        """The partition that handed out ``lease`` (its token starts with that partition's
        tag)."""
        return self._tag_part[str(lease.token).split(".", 1)[0]]

    # -- the crawl ----------------------------------------------------------------------------
    def open(
        self,
        epsilon: float = 0.15,
        refresh: float = 1.0,
        continuous: bool = False,
        window: str = "unbounded",
        meta: dict[str, Any] | None = None,
    ) -> bool:
        """Join the crawl under this key, creating it if there is none; returns whether this
        call created it. :class:`ValueError` for a crawl of another partition count or
        parameters, or an unsharded crawl under the key."""
        window_params(window)  # (ValueError for a window the Redis store does not run)
        c, home = self.client, "{" + self.key + "}"
        self._round_trips += 1
        if c.exists(home + ":s"):
            raise ValueError(
                f"the OPIC crawl {self.key!r} in Redis runs on one partition, not "
                f"{self.n_parts} (OPIC_REDIS_SHARDS=1 to join it)"
            )
        created = bool(c.set(home + ":shards", self.n_parts, nx=True))
        stored = shards_of(c, self.key)
        if stored != self.n_parts:
            raise ValueError(
                f"the OPIC crawl {self.key!r} in Redis runs on {stored} partitions, not "
                f"{self.n_parts} (OPIC_REDIS_SHARDS must match)"
            )
        for part in self.parts:
            part.open(epsilon, refresh, continuous, window, None)
        self.continuous = bool(continuous)
        if created and meta is not None:
            self.set_meta({**meta, "started": time.time(), "shards": self.n_parts})
        self.home._started = float(self.meta().get("started", time.time()))
        self.heartbeat()
        self._refresh_heads()
        self._figures = self.status()
        return created

    def globals(self) -> dict[str, float] | None:
        """Partition 0's parameters and scalars (``None`` if there is no crawl)."""
        return self.parts[0].globals()

    def clear(self) -> int:
        """Delete every key of this crawl (every partition's and its records); returns how
        many."""
        return sum(part.clear() for part in self.parts) + self.home.clear()

    # -- calls on several partitions in one round trip ------------------------------------------
    def _eval_many(self, calls: Sequence[tuple[RedisFrontier, list[Any]]]) -> list[Any]:
        """Run the script once per (partition, arguments) in one pipeline (one round trip to
        each node, in parallel on a cluster); a partition's pending acknowledgements go first.
        A node that lost the script (NOSCRIPT: a restart, a failover) gets it again."""
        if len(calls) == 1:
            part, args = calls[0]
            return [part._call(*args)]
        self._round_trips += 1
        pipe = self.client.pipeline(transaction=False)
        sent = []
        for part, args in calls:
            acks = part.acks
            part.acks = []
            if acks:
                args = ["ack", len(acks), *acks, *args]
            sent.append((part, args, acks))
            pipe.execute_command("EVALSHA", part._script.sha, 1, part.ns, *args)
        try:
            out = pipe.execute(raise_on_error=False)
        except BaseException:
            for part, _, acks in sent:
                part.acks = acks + part.acks
            raise
        for k, (res, (part, args, acks)) in enumerate(zip(out, sent)):
            if isinstance(res, Exception):
                if "NOSCRIPT" not in str(res):
                    part.acks = acks + part.acks
                    raise res
                out[k] = part._script(keys=[part.ns], args=args)
        return out

    def _apply(self, entries: Iterable[tuple[int, str, str, bytes]], token: str = "") -> dict:
        """Apply outbox entries (source, destination, id, entry) on their destinations, in one
        round trip; acknowledge each on its source (in the next call there). Returns
        id -> the schedule codes of the entry's links (empty if it was applied already)."""
        by_dest: dict[str, list] = defaultdict(list)
        for source, dest, eid, blob in entries:
            by_dest[dest].append((source, eid, blob))
        if not by_dest:
            return {}
        calls = []
        for dest, items in by_dest.items():
            args: list[Any] = ["apply", self.lease_ms]
            for _, eid, blob in items:
                args += [eid, token, blob]
            calls.append((self.parts[int(dest)], args))
        codes: dict[str, list[int]] = {}
        for (part, _), dest, res in zip(calls, by_dest, self._eval_many(calls)):
            part.head = parse_head(res[-1])
            for (source, eid, _), got in zip(by_dest[dest], res[:-1]):
                codes[eid] = [int(c) for c in got]
                self.parts[source].acks.append(eid)
                if token and any(c == NEEDS_PAYLOAD for c in codes[eid]):
                    part._holds.append(token)
        return codes

    def _refresh_heads(self) -> None:
        """Read every partition's head, page counts and virtual cash (one round trip)."""
        res = self._eval_many([(part, ["head"]) for part in self.parts])
        waits = []
        for k, (part, r) in enumerate(zip(self.parts, res)):
            part.head = parse_head(r[0])
            self._counts[k] = (int(r[1]), int(r[2]))
            self._vcash[k] = float(r[3])
            if part.head is None and int(r[5]) >= 0:
                waits.append(int(r[5]) / 1000.0)
            elif part.head is None and int(r[5]) == -2:
                waits.append(POLL)
        self._heads_at = time.monotonic()
        self._waits = waits

    def _live(self) -> int:
        return max(1, sum(live for live, _ in self._counts))

    def _send_args(self) -> list[Any]:
        out: list[Any] = ["vs", self.home._token()]
        for live, unf in self._counts:
            out += [live, unf]
        return out

    def _send_virtual(self, ks: Iterable[int]) -> None:
        """Send the virtual cash of partitions ``ks`` to every partition (one call each, then
        their entries applied)."""
        calls = []
        for k in ks:
            args = self._send_args()
            args[0] = "vsend"
            calls.append((self.parts[k], args))
        if not calls:
            return
        entries = []
        for (part, _), res in zip(calls, self._eval_many(calls)):
            entries += [(part.part, d, i, b) for d, i, b in entries_of(res)]
            self._vcash[part.part] = 0.0
        self._apply(entries)

    # -- the contract ---------------------------------------------------------------------------
    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        by_part: dict[int, list[int]] = defaultdict(list)
        for i, e in enumerate(entries):
            by_part[self.part_of(e.url)].append(i)
        codes = [0] * len(entries)
        for k, idx in by_part.items():
            part = self.parts[k]
            for i, code in zip(idx, part.schedule([entries[i] for i in idx], again)):
                codes[i] = code
            top = max(float(entries[i].priority) for i in idx)
            if part.head is None or top > part.head[0]:
                self._heads_at = float("-inf")  # (its head may have changed: read it again)
        return codes

    def pop(self, full_slots: Collection[Hashable] = ()) -> Lease | None:
        """Pop from the partition with the richest head this process knows (heads older than
        :data:`HEAD_TTL`, or none left, are read again once)."""
        refreshed = False
        if time.monotonic() - self._heads_at > HEAD_TTL:
            self._refresh_heads()
            refreshed = True
            # Virtual cash that matters to the order (more than a page's average cash: the
            # endowment before the first pop, a partition this process visits little), sent
            # now, its payout read in the heads; less waits for a visit there or the upkeep.
            live = self._live()
            self._send_virtual(k for k, v in enumerate(self._vcash) if v * live >= 1.0)
        tried: set[int] = set()
        waits: list[float] = []
        while True:
            heads = [
                (part.head, k)
                for k, part in enumerate(self.parts)
                if part.head is not None and k not in tried
            ]
            if not heads:
                if refreshed:
                    break
                self._refresh_heads()
                refreshed = True
                continue
            _, k = max(heads)
            tried.add(k)
            part = self.parts[k]
            lease = part.pop(full_slots)
            if lease is not None:
                self.wake_in = None
                return lease
            if part.wake_in is not None:
                waits.append(part.wake_in)
        # Pages wait in slots the fleet's politeness holds: ask again when one opens.
        waits += self._waits
        self.wake_in = min(waits) if waits else None
        return None

    def visit(
        self,
        lease: Lease,
        links: Sequence[Link],
        virtual_weight: float = 0.0,
        importance: bool = False,
        payload: Any = None,
    ) -> Visit | None:
        k = self.part_of_lease(lease)
        part = self.parts[k]
        dest_of = [self.part_of(link.url) for link in links]
        dests = ["" if d == k else str(d) for d in dest_of]
        self._visits[k] += 1
        if self._visits[k] % SEND_EVERY == 0 or part.vcash * self._live() >= 1.0:
            # (Every few visits, or once the partition's virtual page holds more than a page's
            # average cash: then it matters to the order of the pops.)
            part.send_virtual = self._send_args()
        got = part.visit_out(lease, links, dests, virtual_weight, importance, payload)
        if got is None:
            return None
        visit, entries, unencodable = got
        if not entries:
            return visit
        applied = self._apply([(k, d, i, b) for d, i, b in entries], token=lease.token)
        codes = list(visit.codes)
        # Each destination's codes, in the order of its links (none if another process's
        # upkeep applied the entry first: the page was filed from the entry then).
        per_dest = {d: list(applied.get(f"{k}:{lease.token}>{d}", ())) for d in set(dests) if d}
        for i, link in enumerate(links):
            d = dests[i]
            if not d:
                continue
            got_codes = per_dest[d]
            code = got_codes.pop(0) if got_codes else DUPLICATE
            if code == NEEDS_PAYLOAD and unencodable[i]:
                code = LOCAL
            if code != NEEDS_PAYLOAD and code != LOCAL:
                part._remember(link.key)
            else:
                part._known.discard(link.key)
            codes[i] = code
        return Visit(codes, visit.importance)

    def fail(self, lease: Lease, outcome: int = 0, payload: Any = None) -> bool:
        return self.parts[self.part_of_lease(lease)].fail(lease, outcome, payload)

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        return self.parts[self.part_of_lease(lease)].forfeit(lease, outcome)

    def drop(self, key: Hashable, outcome: int = FILTERED) -> bool:
        # (A key alone: its page is in at most one partition; the others answer no.)
        res = self._eval_many([(part, ["forfeit", key, "", int(outcome)]) for part in self.parts])
        return any(int(r[0]) for r in res)

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        part = self.parts[self.part_of_lease(lease)]
        if self.part_of(entry.url) != part.part:
            # The retry's request goes to another download slot: to its partition, as a
            # redirect to the same page would (the cash moves with it).
            return self.redirect(lease, entry)
        got = part.retry(lease, entry)
        part.head = part.head or (0.0, 0.0)
        self._heads_at = float("-inf")
        return got

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        k, d = self.part_of_lease(lease), self.part_of(entry.url)
        part = self.parts[k]
        if k == d:
            return part.redirect(lease, entry, permanent)
        got = part.redirect_out(lease, entry, permanent, str(d))
        if got is None or isinstance(got, int):
            return got
        applied = self._apply([(k, dd, i, b) for dd, i, b in got], token=lease.token)
        codes = applied.get(got[0][1]) or []
        code = codes[0] if codes else DUPLICATE
        part._remember(entry.key)
        return code

    def set_politeness(
        self,
        concurrency: int,
        delay: float = 0.0,
        jitter: float = 0.0,
        slots: dict[str, tuple[int, float, float]] | None = None,
    ) -> None:
        """:meth:`RedisFrontier.set_politeness` on every partition (a slot's limits apply in
        the partition that holds it)."""
        for part in self.parts:
            part.set_politeness(concurrency, delay, jitter, slots)

    def politeness(self) -> dict[str, Any] | None:
        return self.parts[0].politeness()

    def _by_part(self, leases: Iterable[Lease]) -> dict[int, list[Lease]]:
        out: dict[int, list[Lease]] = defaultdict(list)
        for lease in leases:
            out[self.part_of_lease(lease)].append(lease)
        return out

    def release(self, leases: Iterable[Lease]) -> int:
        return sum(self.parts[k].release(ls) for k, ls in self._by_part(leases).items())

    def renew(self, leases: Iterable[Lease]) -> int:
        by = self._by_part(leases)
        return sum(
            part.renew(by.get(k, ()))
            for k, part in enumerate(self.parts)
            if by.get(k) or part._holds
        )

    def maintain(self, leases: Collection[Lease]) -> None:
        """:meth:`RedisFrontier.maintain` on every partition; then the upkeep of the journal:
        entries older than a lease replayed (their process died or stalled), the virtual cash
        of every partition sent, acknowledgements flushed, and old applied ids forgotten."""
        for part in self.parts:
            if part._holds:
                part._unhold()
        self.renew(leases)
        self.heartbeat()
        self._refresh_heads()
        self.replay()
        self._send_virtual(k for k, v in enumerate(self._vcash) if v > 0)
        self._flush_acks()
        self._upkeeps += 1
        if self._upkeeps % 10 == 1:
            self.forget_applied()
        f = self.home.series_tick(self.status)
        if f is not None:
            self._figures = f

    def _server_ms(self) -> int:
        self._round_trips += 1
        sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000

    def replay(self, older_than_ms: int | None = None) -> int:
        """Apply the outbox entries older than ``older_than_ms`` (default: a lease) on their
        destinations, again if need be (applying is idempotent); returns how many."""
        age = self.lease_ms if older_than_ms is None else older_than_ms
        cutoff = self._server_ms() - age
        entries = []
        self._round_trips += 1
        pipe = self.client.pipeline(transaction=False)
        for part in self.parts:
            pipe.zrangebyscore(part.ns + ":outt", "-inf", cutoff, start=0, num=REPLAY_BATCH)
        old = [(part, ids) for part, ids in zip(self.parts, pipe.execute()) if ids]
        if not old:
            return 0
        self._round_trips += 1
        pipe = self.client.pipeline(transaction=False)
        for part, ids in old:
            pipe.hmget(part.ns + ":out", ids)
        for (part, ids), blobs in zip(old, pipe.execute()):
            for eid, blob in zip(ids, blobs):
                eid = eid.decode()
                if blob is None:  # (acknowledged meanwhile)
                    continue
                entries.append((part.part, eid.rsplit(">", 1)[1], eid, blob))
        self._apply(entries)
        return len(entries)

    def _flush_acks(self) -> None:
        pipe = None
        for part in self.parts:
            if part.acks:
                pipe = pipe or self.client.pipeline(transaction=False)
                pipe.hdel(part.ns + ":out", *part.acks)
                pipe.zrem(part.ns + ":outt", *part.acks)
                part.acks = []
        if pipe is not None:
            self._round_trips += 1
            pipe.execute()

    def forget_applied(self) -> int:
        """Forget the applied ids whose entries their sources no longer hold (acknowledged:
        never replayed again), older than two leases. Returns how many."""
        c = self.client
        cutoff = self._server_ms() - 2 * self.lease_ms
        n = 0
        for part in self.parts:
            self._round_trips += 1
            ids = c.zrangebyscore(part.ns + ":applied", "-inf", cutoff, start=0, num=1000)
            if not ids:
                continue
            self._round_trips += 1
            pipe = c.pipeline(transaction=False)
            for eid in ids:
                source = int(eid.split(b":", 1)[0])
                pipe.hexists(self.parts[source].ns + ":out", eid)
            gone = [eid for eid, held in zip(ids, pipe.execute()) if not held]
            if gone:
                self._round_trips += 1
                n += c.zrem(part.ns + ":applied", *gone)
        return n

    def close(self, leases: Collection[Lease]) -> None:
        """Hand ``leases`` back, apply what this process's entries still owe, and leave."""
        try:
            by = self._by_part(leases)
            for k, part in enumerate(self.parts):
                if by.get(k):
                    part.release(by[k])
                if part._holds:
                    part._unhold(leaving=True)
            self._flush_acks()
            self.leave()
        finally:
            self.client.close()

    def has_pending(self) -> bool:
        f = self._figures = self.status()
        return f["pending"] > 0 or f["leases"] > 0 or f["holds"] > 0 or f["transit"] > 0

    def __len__(self) -> int:
        return int(self._figures.get("pending", 0))

    def figures(self) -> dict[str, float]:
        self._figures = self.status()
        return dict(self._figures)

    def status_of(self, key: Hashable) -> str | None:
        for part in self.parts:
            st = part.status_of(key)
            if st is not None:
                return st
        return None

    def cash_of(self, key: Hashable) -> float | None:
        for part in self.parts:
            if part._page(key) is not None:
                return part.cash_of(key)
        return None

    def total_cash(self) -> float:
        """All cash: the partitions' pages and virtual pages and the outboxes (1 up to
        rounding when no process is running). O(pages)."""
        return self.snapshot().engine().total_cash()

    def top_page(self) -> tuple[str, float] | None:
        return None

    # -- figures and records ------------------------------------------------------------------
    def status(self) -> dict[str, float]:
        """The crawl's figures summed over its partitions (one round trip), with ``transit``:
        outbox entries not yet acknowledged. O(partitions)."""
        self._round_trips += 1
        c = self.client
        pipe = c.pipeline(transaction=False)
        for part in self.parts:
            pipe.get(part.ns + ":s")
            pipe.zcard(part.ns + ":leases")
            pipe.zcard(part.ns + ":holds")
            pipe.hlen(part.ns + ":out")
        pipe.hlen(self.home.ns + ":workers")
        res = pipe.execute()
        gs = [_unpack_globals(b) if b else {} for b in res[0:-1:4]]
        leases, holds, transit = sum(res[1:-1:4]), sum(res[2:-1:4]), sum(res[3:-1:4])

        total = {name: float(sum(g.get(name, 0.0) for g in gs)) for name in SCALARS}
        n, visits = total["n"], total["visits"]
        figures = status_figures(total, int(leases), int(holds), int(res[-1]))
        # (Each partition's running mean of cash taken per visit times its pages, over the
        # crawl: weighted by visits and scaled to all the pages.)
        ema = 0.0
        for g in gs:
            if g.get("n") and visits:
                gathered = 1.0 - VISIT_DECAY ** g["visits"]
                if gathered > 0:
                    ema += g["visits"] / visits * g["ema"] / gathered * n / g["n"]
        return {
            **figures,
            "cash_at_visit_x_n": ema,
            "transit": int(transit),
            "shards": self.n_parts,
        }

    def slot_figures(self) -> tuple[int, int]:
        """Download slots held by the fleet's politeness, and slots with pages in flight."""
        pipe = self.client.pipeline(transaction=False)
        for part in self.parts:
            pipe.zcard(part.ns + ":blocked")
            pipe.hlen(part.ns + ":busy")
        res = pipe.execute()
        return sum(res[0::2]), sum(res[1::2])

    def heartbeat(self) -> None:
        self.home.heartbeat()

    def leave(self) -> None:
        self.home.leave()
        for part in self.parts:
            part.leave()

    def add_point(self, point: dict[str, float], keep: int = 10_000) -> None:
        self.home.add_point(point, keep)

    def series(self) -> list[dict[str, float]]:
        return self.home.series()

    def set_meta(self, meta: dict[str, Any]) -> None:
        self.home.set_meta(meta)

    def meta(self) -> dict[str, Any]:
        return self.home.meta()

    def snapshot(self) -> ShardedSnapshot:
        """Every partition's pages read into one :class:`OpicEngine` (see
        :class:`ShardedSnapshot`)."""
        return ShardedSnapshot(self)

    def in_transit(self) -> float:
        """The cash in the outboxes: entries written and not yet applied (an entry applied
        and not yet acknowledged is in its destination's books already)."""
        c = self.client
        total = 0.0
        for part in self.parts:
            self._round_trips += 1
            out = c.hgetall(part.ns + ":out")
            if not out:
                continue
            self._round_trips += 1
            pipe = c.pipeline(transaction=False)
            for eid in out:
                dest = int(eid.rsplit(b">", 1)[1])
                pipe.zscore(self.parts[dest].ns + ":applied", eid)
            for blob, done in zip(out.values(), pipe.execute()):
                if done is None:
                    total += float(np.frombuffer(blob[:8], "<f8")[0])
        return total

    def check(self) -> list[str]:
        """Every partition's :meth:`RedisFrontier.check` (prefixed with its number), every
        pending page in the partition of its download slot, and the total cash (pages,
        virtual pages and outboxes) equal to 1. O(pages), while no process runs."""
        problems = []
        for part in self.parts:
            problems += [f"partition {part.part}: {p}" for p in part.check()]
        total = self.total_cash()
        if abs(total - 1.0) > 1e-9:
            problems.append(f"total cash {total!r} != 1 (pages, virtual pages and outboxes)")
        return problems


class ShardedSnapshot(RedisSnapshot):
    """Every partition's pages in one :class:`OpicEngine`, with the reading interface of
    :class:`RedisSnapshot`. Each partition's numbers are relative to its own accumulators and
    clock; merged, a page's stored cash is its true cash, its teleport-credit baseline is
    relative to no accumulator; its received-credit moments and last-visit time are on its
    partition's clock, the crawl's G clock as that partition knew it, and the merged G is the
    sum of the partitions'. The outboxes' cash is in the virtual page."""

    def __init__(self, frontier: ShardedRedisFrontier) -> None:
        snaps = [RedisSnapshot(part) for part in frontier.parts]
        states = [s._state for s in snaps]
        gs = [part.globals() for part in frontier.parts]
        if any(g is None for g in gs):
            raise StoreError(f"the sharded OPIC crawl {frontier.key!r} lacks a partition")
        G = sum(g["G"] for g in gs)
        arrays: dict[str, list[np.ndarray]] = defaultdict(list)
        scalars: dict[str, float] = defaultdict(float)
        for st, g in zip(states, gs):
            a, sc = st["arrays"], st["scalars"]
            flags = a["flags"]
            dead = (flags & DEAD) != 0
            unf = (flags & FETCHED) == 0
            off = np.where(dead, 0.0, g["acca"] + np.where(unf, g["accu"], 0.0))
            for name, arr in a.items():
                if name == "s":
                    arr = arr + off
                elif name == "cb":
                    arr = arr - g["accc"]
                arrays[name].append(arr)
            for name in (
                "g_real",
                "virtual_history",
                "visit_count",
                "credit_total",
                "credit_passed",
                "credit_dangling",
                "n_dead",
                "b_total",
                "d_total",
            ):
                scalars[name] += sc[name]
            scalars["virtual_cash"] += g["vcash"] + g["vin"] + g["vinu"]
            scalars["default_rate"] += sc["default_rate"] * sc["visit_count"]
        visits = scalars["visit_count"]
        n = sum(s.n for s in snaps)
        state = {
            "params": states[0]["params"],
            "scalars": {
                **scalars,
                "n": n,
                "G": G,
                "acc_all": 0.0,
                "acc_unfetched": 0.0,
                "acc_credit": 0.0,
                "n_unfetched": sum(st["scalars"]["n_unfetched"] for st in states),
                "n_initial": 0,
                "c0": 0.0,
                "visit_count": int(visits),
                "n_dead": int(scalars["n_dead"]),
                "_cash_at_visit_ema": 0.0,
                "default_rate": scalars["default_rate"] / visits if visits else 0.0,
                "virtual_cash": scalars["virtual_cash"] + frontier.in_transit(),
            },
            "arrays": {k: np.concatenate(v) for k, v in arrays.items()},
            "window": {},
            "keys": [k for s in snaps for k in s.keys],
        }
        self._state = state
        self._meta = frontier.meta()
        self._meta.setdefault("series", frontier.series())
        self.n = n
        self.status = b"".join(s.status for s in snaps)
        self.outcome = b"".join(s.outcome for s in snaps)
        self.continuous = snaps[0].continuous
        self.urls = [u for s in snaps for u in s.urls]
        self.keys = state["keys"]
        self.figures = frontier.status()


def connect_crawl(url: str, key: str, **kw: Any) -> RedisFrontier | ShardedRedisFrontier:
    """The crawl under ``key`` at ``url`` for a reader: sharded if it was started so."""
    client = open_client(url)
    kw.setdefault("location", f"{url}#{key}")
    try:
        shards = shards_of(client, key)
    except BaseException:
        client.close()
        raise
    if shards is not None:
        return ShardedRedisFrontier(client, key, shards, **kw)
    return RedisFrontier(client, key, **kw)


__all__ = [
    "HEAD_TTL",
    "ShardedRedisFrontier",
    "ShardedSnapshot",
    "connect_crawl",
    "partition_of",
    "shards_of",
]
