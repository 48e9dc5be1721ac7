"""Test support for partitioned crawls: an in-memory transport between fleets (processes) that
can lose a process, reorder and repeat messages; and the invariants of a partitioned crawl, for
a crawl in memory or read back from Redis."""

from __future__ import annotations

import hashlib
import pickle
import random
from collections.abc import Iterable

from scrapy_opic.opic.constants import IN_FLIGHT, PENDING, STATUSES, VISITED
from scrapy_opic.opic.contract import Entry
from scrapy_opic.opic.fleet import Fleet
from scrapy_opic.opic.journal import Member
from scrapy_opic.opic.messages import POOL, Message, in_transit
from scrapy_opic.opic.partition import Partition
from scrapy_opic.opic.pool import Pool
from scrapy_opic.opic.routing import partition_of
from tests.support.frontiers import L, visit


def key(url: str) -> bytes:
    return hashlib.sha1(url.encode()).digest()


class Store:
    """What a durable store keeps of each member: a checkpoint and the records since."""

    def __init__(self) -> None:
        self.checkpoints: dict[int, bytes] = {}
        self.journals: dict[int, list[tuple]] = {}

    def write(self, member: Member) -> None:
        if member.k == POOL:  # (the pool is written whole, as the Redis backend does)
            self.checkpoint(member)
            return
        self.journals.setdefault(member.k, []).extend(member.take_journal())
        member.durable = member.records

    def checkpoint(self, member: Member) -> None:
        member.take_journal()
        self.checkpoints[member.k] = pickle.dumps(member.state())
        self.journals[member.k] = []
        member.durable = member.records

    def load(self, k: int, fleet: Fleet) -> Member:
        if k == POOL:
            raw = self.checkpoints.get(k)
            return Pool.from_state(pickle.loads(raw)) if raw else Pool()
        raw = self.checkpoints.get(k)
        if raw is None:
            part = Partition.new(k, fleet.config, time_fn=fleet.time_fn)
        else:
            part = Partition.from_state(pickle.loads(raw), fleet.config, time_fn=fleet.time_fn)
        part.replay(self.journals.get(k, []))
        return part


class Bus:
    """Fleets exchanging messages in memory as they do through Redis: a flush writes each
    member's records to the :class:`Store` (deleting the inbox entries it applied, as one
    step) and appends the messages those records make durable to their destinations'
    inboxes; a delivery has each member apply its inbox's new entries. Entries can be put in
    a shuffled order, and some twice. A process that is killed loses what it did not write;
    its successor reads the inboxes from their start."""

    def __init__(self, fleets: list[Fleet], store: Store | None = None, seed: int = 0) -> None:
        self.fleets = fleets
        self.store = store or Store()
        self.inbox: dict[int, list[tuple[int, Message]]] = {}
        self.notes: dict[int, list] = {}
        self.read: dict[int, int] = {}  # member -> last entry id read by its owner
        self.consumed: dict[int, list[int]] = {}
        self.rnd = random.Random(seed)
        self._id = 0

    def owner(self, k: int) -> Fleet | None:
        for f in self.fleets:
            if (k == POOL and f.pool is not None) or k in f.parts:
                return f
        return None

    def flush(
        self,
        fleet: Fleet | None = None,
        reports: bool = True,
        shuffle: bool = False,
        repeat: float = 0.0,
        fail: float = 0.0,
    ) -> None:
        """Write each fleet's members and send what may leave; ``fail``: each member's write
        fails with that probability (written again at the next flush), as one member's
        script of a Redis Cluster can (not with an atomic fleet)."""
        for f in [fleet] if fleet else list(self.fleets):
            if reports:
                f.reports()
            if f.atomic:  # (what it applies now is written with what made it, below)
                f.deliver_local()
            for m in f.members():
                if fail and not f.atomic and self.rnd.random() < fail:
                    continue
                self.store.write(m)
                gone = set(self.consumed.pop(m.k, []))
                self.inbox[m.k] = [e for e in self.inbox.get(m.k, []) if e[0] not in gone]
            f.durable_now()
            msgs, notes = f.outgoing()
            if shuffle:
                self.rnd.shuffle(msgs)
            msgs += [m for m in msgs if self.rnd.random() < repeat]
            for m in msgs:
                self._id += 1
                self.inbox.setdefault(m.dst, []).append((self._id, m))
                f.member(m.src).confirm(m.dst, m.seq)  # (delivered: in the inbox)
            for n in notes:
                self.notes.setdefault(n.dst, []).append(n)

    def deliver(self) -> None:
        for f in self.fleets:
            for m in f.members():
                start = self.read.get(m.k, 0)
                for entry_id, msg in self.inbox.get(m.k, []):
                    if entry_id > start:
                        f.deliver(msg)
                        self.read[m.k] = entry_id
                        if msg.seq not in m.box.waiting.get(msg.src, {}):
                            self.consumed.setdefault(m.k, []).append(entry_id)
                for n in self.notes.pop(m.k, []):
                    f.note(n)

    def round(self, shuffle: bool = False, repeat: float = 0.0, fail: float = 0.0) -> None:
        self.flush(shuffle=shuffle, repeat=repeat, fail=fail)
        self.deliver()

    def kill(self, fleet: Fleet) -> None:
        """``fleet`` dies: what it did not write is lost."""
        self.fleets.remove(fleet)
        for m in fleet.members():
            self.read.pop(m.k, None)
            self.consumed.pop(m.k, None)

    def adopt(self, fleet: Fleet, k: int) -> None:
        """``fleet`` takes member ``k`` over from the store; what it had not known delivered
        goes out again at its next flush."""
        member = self.store.load(k, fleet)
        if k == POOL:
            fleet.adopt_pool(member)  # type: ignore[arg-type]
        else:
            fleet.adopt(member)  # type: ignore[arg-type]
        member.outbox = [(m, 0) for m in member.resend()]

    def members(self) -> dict[int, Member]:
        return {m.k: m for f in self.fleets for m in f.members()}

    def moving(self) -> list[Message]:
        """Messages not applied yet: in the inboxes, or made and not known delivered."""
        members = self.members()
        out: dict[tuple, Message] = {}
        for entries in self.inbox.values():
            for _id, m in entries:
                out[(m.src, m.dst, m.seq)] = m
        for mem in members.values():
            for m in mem.box.unconfirmed.values():
                out[(m.src, m.dst, m.seq)] = m
        return [m for m in out.values() if m.dst not in members or members[m.dst].box.is_new(m)]

    def total_cash(self) -> float:
        """The crawl's cash: every member's pages and virtual pages, and the messages not yet
        applied."""
        total = 0.0
        for f in self.fleets:
            total += sum(p.frontier.engine.total_cash() for p in f.parts.values())
            if f.pool is not None:
                total += f.pool.total_cash()
        return total + in_transit(self.moving())


def crawl_step(fleet: Fleet, links_of, payload: bytes = b"r") -> bool:
    """Pop one page of ``fleet`` and visit it with its links (``links_of(url)``): whether there
    was one."""
    lease = fleet.pop()
    if lease is None:
        return False
    links = [L(key(u), u, payload=payload) for u in links_of(lease.url)]
    assert visit(fleet, lease, links) is not None
    return True


def seed(fleets: Iterable[Fleet], url: str) -> None:
    """File the crawl's seed in the fleet that owns its partition, and endow that partition."""
    for f in fleets:
        k = partition_of(url, key(url), f.P, f.by)
        if k in f.parts:
            f.parts[k].endow()
            f.schedule([Entry(key(url), url, 0, "", b"seed", seed=True)])
            return
    raise AssertionError("no fleet owns the seed's partition")


def partition_problems(part: Partition) -> list[str]:
    """The invariants of one partition's frontier: status counts, payloads of the pages that
    wait, the selection's candidates, and every page in the partition its URL says."""
    fr = part.frontier
    e = fr.engine
    out = []
    n = e.n
    counts = [0] * len(STATUSES)
    for i in range(n):
        st = fr.status[i]
        counts[st] += 1
        if st in (PENDING, IN_FLIGHT) and i not in fr.rows.payloads:
            out.append(f"partition {part.k}: page {i} waits without a payload")
        if st == PENDING and i not in fr.selection:
            out.append(f"partition {part.k}: pending page {i} is not a candidate")
        if st == VISITED and i in fr.selection:
            out.append(f"partition {part.k}: visited page {i} is a candidate")
        url = fr.url_of(i)
        if url is not None and part.route(url, e.key_of(i)) != part.k:
            out.append(f"partition {part.k}: page {url} belongs to another partition")
    if counts != fr.counts:
        out.append(f"partition {part.k}: status counts {fr.counts}, pages say {counts}")
    return out


def sequence_problems(members: dict[int, Member], moving: Iterable[Message]) -> list[str]:
    """Numbered messages: no destination applied more of a source's than the source made, and
    every message the source made beyond what its destination applied is on its way."""
    out = []
    have = {(m.src, m.dst, m.seq) for m in moving}
    for src, member in members.items():
        for dst, sent in member.box.next_seq.items():
            got = members[dst].box.applied.get(src, 0) if dst in members else 0
            if got > sent:
                out.append(f"{dst} applied {got} messages of {src}, which made {sent}")
            missing = [s for s in range(got + 1, sent + 1) if (src, dst, s) not in have]
            if dst in members and missing:
                out.append(f"messages {missing[:5]} of {src} to {dst} are nowhere")
    return out
