"""What the members of a crawl over partitions send each other, and the mailbox that applies
it once and in order.

A *message* carries money: a :class:`Transfer` (shares of links, a redirect's cash) from a
partition to another, a :class:`Report` from a partition to the crawl's pool, a
:class:`Payout` from the pool to a partition. Each is numbered per pair of members (1, 2...):
its destination applies each pair's messages once and in order (:class:`Mailbox`), so a
message delivered twice (a sender that died before it knew its message arrived, and whose
successor sends it again) or early (after a later one) changes nothing.

A *note* (:class:`FileNote`, :class:`DropNote`, :class:`LateNote`) asks a partition this
process does not own to file or drop a page, or tells it the outcomes of pages it handed out
before it lost the partition: no money, so nothing is lost or made if it is lost or comes
twice.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, NamedTuple

from .contract import Entry
from .engine import Share
from .importance import CrawlView

#: The number of the crawl's pool, as a message's source or destination.
POOL = -1


class Payment(NamedTuple):
    """A :class:`~.engine.Share` for one page of the destination, and the request that files
    it there (a redirect's target), or None."""

    key: Hashable
    url: str
    share: Share
    entry: Entry | None = None


class Figures(NamedTuple):
    """What a partition tells the pool of itself (the pool adds them up)."""

    live: int  #: pages not closed
    unfetched: int  #: live pages never fetched
    pages: int
    credit_total: float  #: the engine's credit sums (see :class:`~.importance.CrawlView`)
    b_total: float
    d_total: float
    credit_passed: float
    credit_dangling: float
    normaliser: float  #: the sum of the window's estimates
    visits: int
    discovered: int
    pending: int
    in_flight: int
    visited: int
    fetched: int


class Transfer(NamedTuple):
    """Payments from partition ``src`` to pages of partition ``dst``."""

    src: int
    dst: int
    seq: int
    payments: tuple[Payment, ...]


class Report(NamedTuple):
    """What partition ``src`` leaves to the pool: virtual cash owed to the other partitions'
    live pages (``to_all``) and pages never fetched (``to_unfetched``), the teleport credit it
    gave, the clock it made since its last report, and its figures."""

    src: int
    dst: int
    seq: int
    to_all: float
    to_unfetched: float
    credit: float
    clock: float
    figures: Figures


class Payout(NamedTuple):
    """The pool's payment to partition ``dst``: its share of the others' virtual cash, the
    teleport credit every page of the crawl was given, the clock of the rest of the crawl and
    the crawl's sums."""

    src: int
    dst: int
    seq: int
    to_all: float
    to_unfetched: float
    teleport: float
    others: float
    view: CrawlView


Message = Transfer | Report | Payout


class FileNote(NamedTuple):
    """File ``entries`` in partition ``dst``."""

    dst: int
    entries: tuple[Entry, ...]
    again: bool


class DropNote(NamedTuple):
    """Give up page ``key`` of partition ``dst`` before its fetch (a dupefilter's refusal)."""

    dst: int
    key: Hashable
    outcome: int


class LateNote(NamedTuple):
    """The outcomes of pages of partition ``dst`` that a process handed out while it owned the
    partition and settled after it lost it (its lease lapsed): journal records, applied by the
    partition's owner to the pages it holds in doubt (:meth:`Partition.late
    <scrapy_opic.opic.partition.Partition.late>`)."""

    dst: int
    records: tuple[Any, ...]


Note = FileNote | DropNote | LateNote


def in_transit(messages: Iterable[Message]) -> float:
    """The cash that ``messages`` carry."""
    total = 0.0
    for m in messages:
        if isinstance(m, Transfer):
            total += sum(p.share.cash for p in m.payments)
        else:
            total += m.to_all + m.to_unfetched
    return total


class Mailbox:
    """A member's numbered messages, both ways.

    Sending: :meth:`stamp` numbers a message for its destination and keeps it *unconfirmed*
    until :meth:`confirm` (its delivery is known); :attr:`delivered` is, per destination, the
    last number known delivered. Receiving: :meth:`accept` applies each source's messages
    once, in order of their numbers: one already applied is a duplicate, one ahead of a gap
    waits."""

    def __init__(self) -> None:
        self.next_seq: dict[int, int] = {}  # destination -> last number given
        self.applied: dict[int, int] = {}  # source -> last number applied
        self.delivered: dict[int, int] = {}  # destination -> last number known delivered
        self.unconfirmed: dict[tuple[int, int], Message] = {}  # (destination, seq) -> message
        self.waiting: dict[int, dict[int, Message]] = {}  # source -> seq -> message

    def stamp(self, kind: Any, src: int, dst: int, *body: Any) -> Message:
        """A new message of ``kind`` (:class:`Transfer`, :class:`Report`, :class:`Payout`)
        from ``src`` to ``dst``, numbered."""
        seq = self.next_seq.get(dst, 0) + 1
        self.next_seq[dst] = seq
        m: Message = kind(src, dst, seq, *body)
        self.unconfirmed[(dst, seq)] = m
        return m

    def confirm(self, dst: int, seq: int) -> None:
        if seq > self.delivered.get(dst, 0):
            self.delivered[dst] = seq
        for s in [s for (d, s) in self.unconfirmed if d == dst and s <= seq]:
            del self.unconfirmed[(dst, s)]

    def drop_delivered(self) -> None:
        """Forget the unconfirmed messages that :attr:`delivered` says arrived (after a
        replay, which makes every message again)."""
        gone = [k for k in self.unconfirmed if k[1] <= self.delivered.get(k[0], 0)]
        for k in gone:
            del self.unconfirmed[k]

    def accept(self, m: Message) -> list[Message]:
        """The messages to apply now, in order: ``m`` and those that waited behind it, if ``m``
        is the next of its source; none if it is a duplicate or early (it waits)."""
        done = self.applied.get(m.src, 0)
        if m.seq <= done:
            return []
        if m.seq > done + 1:
            self.waiting.setdefault(m.src, {})[m.seq] = m
            return []
        out = [m]
        later = self.waiting.get(m.src)
        seq = m.seq
        while later and seq + 1 in later:
            seq += 1
            out.append(later.pop(seq))
        self.applied[m.src] = seq
        return out

    def is_new(self, m: Message) -> bool:
        """``m`` is neither applied already nor waiting."""
        return m.seq > self.applied.get(m.src, 0) and m.seq not in self.waiting.get(m.src, {})

    def waits(self, m: Message) -> bool:
        """``m`` waits for an earlier message of its source."""
        return m.seq in self.waiting.get(m.src, {})

    def state(self) -> dict[str, Any]:
        return {
            "next_seq": dict(self.next_seq),
            "applied": dict(self.applied),
            "delivered": dict(self.delivered),
            "unconfirmed": sorted(self.unconfirmed.values(), key=lambda m: (m.dst, m.seq)),
        }

    def load(self, state: dict[str, Any]) -> None:
        self.next_seq = dict(state["next_seq"])
        self.applied = dict(state["applied"])
        self.delivered = dict(state["delivered"])
        self.unconfirmed = {(m.dst, m.seq): m for m in state["unconfirmed"]}
        self.waiting = {}
