"""The journal of a partition: one named record per change, in the order the changes happened,
and what every member of a crawl over partitions keeps to send and to make durable.

A partition's checkpoint plus the records made since rebuild it exactly
(:meth:`~.partition.Partition.replay`: the same operations in the same order give the same
floats), the messages it sent included. Each record keeps the wall-clock time its operation
read (``at``), so a replay reads the same.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple

from .contract import Entry, Link
from .messages import Mailbox, Message


class Filed(NamedTuple):
    at: float
    entries: tuple[Entry, ...]
    again: bool


class Visited(NamedTuple):
    at: float
    key: Hashable
    links: tuple[Link, ...]
    virtual_weight: float
    payload: Any
    outcome: int
    changed: bool | None
    modified: float | None


class Leased(NamedTuple):
    """A page handed out: its request may go out once this record is durable. A next owner
    of the partition holds the page *in doubt* until this one's outcome comes (see
    :meth:`~.partition.Partition.late`) or its time runs out."""

    at: float
    key: Hashable


class Released(NamedTuple):
    """A page handed out is pending again: its request was not sent, or no outcome of it
    will come (a lease given back, a doubt given up)."""

    at: float
    key: Hashable


class Unchanged(NamedTuple):
    at: float
    key: Hashable
    payload: Any


class Relayed(NamedTuple):
    """A relay visit: the page's cash paid over its kept links, without a download."""

    at: float
    key: Hashable


class Failed(NamedTuple):
    at: float
    key: Hashable
    outcome: int
    payload: Any


class Forfeited(NamedTuple):
    at: float
    key: Hashable
    outcome: int


class Dropped(NamedTuple):
    at: float
    key: Hashable
    outcome: int


class Forgot(NamedTuple):
    """The pages of a download slot forgot what a lie taught their change rates: the time
    they were thought unchanged, the change a first look's ``Last-Modified`` dated, or both."""

    at: float
    slot: Hashable
    unchanged: bool
    dated: bool


class Retried(NamedTuple):
    at: float
    key: Hashable
    entry: Entry


class Redirected(NamedTuple):
    at: float
    key: Hashable
    entry: Entry
    permanent: bool


class PaidOut(NamedTuple):
    """The virtual page paid its partition's share, by these counts of the other partitions'
    live pages and pages never fetched (None: as the pool last told)."""

    others: tuple[int, int] | None


class Applied(NamedTuple):
    at: float
    message: Message


class Reported(NamedTuple):
    at: float


class Confirmed(NamedTuple):
    dst: int
    seq: int


class Started(NamedTuple):
    """A partition made while the crawl runs: the teleport credit its pages are owed."""

    teleport: float


class Endowed(NamedTuple):
    cash: float


class Member:
    """What a partition and the pool share: a number, a mailbox, the messages made since the
    transport last took them (each with the number of records at its making: it may leave once
    the journal is durable that far), the records since the store last took them, and how many
    records are durable. ``journaled``: records are kept for the store (else only counted: a
    store that keeps checkpoints alone)."""

    def __init__(self, k: int, journaled: bool = True) -> None:
        self.k = k
        self.box = Mailbox()
        self.journaled = journaled
        #: Messages made and not handed to the transport yet: ``(message, records)``, the
        #: message sendable once :attr:`durable` reaches ``records``.
        self.outbox: list[tuple[Message, int]] = []
        #: Records made since the store took them (:meth:`take_journal`).
        self.journal: list[NamedTuple] = []
        #: Records made so far (from this member's checkpoint on) and, of those, durable.
        self.records = 0
        self.durable = 0
        #: Bumped by every change (a cached best page is stale).
        self.version = 0
        self.replaying = False

    def _send(self, kind: Any, dst: int, *body: Any) -> Message:
        m = self.box.stamp(kind, self.k, dst, *body)
        self.outbox.append((m, self.records + 1))  # (sendable with the record that makes it)
        return m

    def _count(self) -> None:
        """A change: one more record (and a cached best page is stale)."""
        self.version += 1
        self.records += 1

    def _record(self, rec: NamedTuple) -> None:
        self._count()
        if self.journaled and not self.replaying:
            self.journal.append(rec)

    def _log(self, kind: Any, *fields: Any) -> None:
        """:meth:`_record` a record of ``kind``, made only if the journal keeps it."""
        self._count()
        if self.journaled and not self.replaying:
            self.journal.append(kind(*fields))

    def receive(self, m: Message) -> int:
        """Apply message ``m`` if it is the next of its source (with those that waited behind
        it); how many were applied."""
        ready = self.box.accept(m)
        for r in ready:
            self._apply(r)
        return len(ready)

    def _apply(self, m: Message) -> None:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Everything to rebuild this member (a checkpoint)."""
        raise NotImplementedError

    def take_journal(self) -> list[NamedTuple]:
        """The records made since the last call, for the store to keep in order."""
        out, self.journal = self.journal, []
        return out

    def sendable(self, every: bool = False) -> list[Message]:
        """The messages whose records are durable (``every``: all, their records being
        written in the same atomic step as they are sent), taken from the outbox."""
        if every:
            ready = [m for m, _ in self.outbox]
            self.outbox = []
            return ready
        ready = [m for m, at in self.outbox if at <= self.durable]
        self.outbox = [(m, at) for m, at in self.outbox if at > self.durable]
        return ready

    def resend(self) -> list[Message]:
        """Every message not known delivered (after a takeover: its new owner sends them again;
        their destinations drop those they have), in order; the outbox starts afresh."""
        self.outbox = []
        return sorted(self.box.unconfirmed.values(), key=lambda m: (m.dst, m.seq))

    def confirm(self, dst: int, seq: int) -> None:
        """The transport delivered message ``seq`` to ``dst`` (and every one before it)."""
        if seq > self.box.delivered.get(dst, 0):
            self.box.confirm(dst, seq)
            self._record(Confirmed(dst, seq))
