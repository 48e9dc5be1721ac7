"""What a crawl asks of the place it is kept: the store protocol, and the store of a crawl kept
in memory alone.

A crawl (:class:`~scrapy_opic._backends.crawl.Crawl`) runs the partitions this process owns (a
:class:`~scrapy_opic.opic.fleet.Fleet`); a store keeps them and carries what crosses processes,
and computes nothing of OPIC. It:

* loads a partition (or the crawl's pool) under a lease: its checkpoint and the journal since,
  replayed through the same engine (:meth:`Store.claim`); a new one if it has none;
* writes, in one step per flush (:meth:`Store.flush`), each member's new journal records or a
  checkpoint that replaces them, fenced by its lease (a process that lost a member can never
  write over its successor's), with the messages and notes for other processes' members; and
  reads the members' inboxes;
* keeps the leases (renewed by each write, released, lapsed when a process stops renewing)
  and tells who is alive and owns what (:meth:`Store.beat`);
* adds up the figures of the members it keeps (:meth:`Store.figures`);
* keeps the verdicts on hosts' validators (:meth:`Store.judge`), for every process and every
  resume: a host found to lie is not trusted again by whoever crawls it next.

Two stores implement it: :class:`~scrapy_opic._backends.sqlite.SqliteStore` (one process, one
partition, checkpoints in a sqlite file) and :class:`~scrapy_opic._backends.redis.RedisStore`
(partitions over processes, a Redis server or cluster); :class:`MemoryStore` keeps a crawl in
this process's memory only (a ``scrapy parse`` or ``scrapy shell`` run, which writes no state).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NamedTuple, Protocol

from ..opic.config import CrawlConfig
from ..opic.journal import Member
from ..opic.messages import POOL, Message, Note
from ..opic.partition import Partition
from . import StoreError


class Claim(NamedTuple):
    """A member a store loaded for this process: the lease's token, the journal batches stored
    after its checkpoint, whether it was made now (no checkpoint, no journal: its pages are owed
    the crawl's teleport credit), whether it takes the crawl's endowment, and what the crawl
    keeps with the member (its time series, its discovery debt), if it does."""

    member: Member
    token: str
    log: int
    new: bool
    endow: bool
    crawl: dict | None = None


class FleetView(NamedTuple):
    """What a beat reads: the live processes (this one among them), the partitions in use (with
    pages or messages), and who owns what as the owners last said."""

    workers: list[str]
    parts: list[int]
    owners: dict[int, str]


class Write(NamedTuple):
    """One member's write: its lease token, its journal length as this process knows it, the
    new journal batches or a checkpoint that replaces them, its figures, the inbox entries it
    applied (deleted with the write), and what the crawl keeps with it (see :class:`Claim`)."""

    k: int
    token: str
    log: int
    batches: list[list[Any]]
    checkpoint: Member | None
    figures: Mapping[str, float]
    consumed: list[Any]
    crawl: dict | None = None


#: What a store says of a write: written (``length``: the journal's batches now, 0 after a
#: checkpoint), the lease lost (another process owns the member now), a journal of another
#: length than the writer knew (``length``), or an error (nothing written: try again).
WRITTEN, LOST, SHORT, FAILED = "written", "lost", "short", "failed"


class Outcome(NamedTuple):
    status: str
    length: int = 0


class Flushed(NamedTuple):
    """What a flush did: each write's :class:`Outcome`, the messages known delivered and those
    to send again, the inbox entries read, per member ``(entry id, messages, notes)``, and the
    notes to send again."""

    written: dict[int, Outcome]
    delivered: list[Message]
    unsent: list[Message]
    inbox: dict[int, list[tuple[Any, list[Message], list[Note]]]]
    unsent_notes: list[Note]


class Store(Protocol):
    """Where a crawl is kept (see the module docstring)."""

    #: Where a reader finds the crawl (a file path, ``redis://...#key``), or None.
    location: str | None
    #: This process's name among the crawl's.
    worker: str
    #: Several processes share the crawl: payloads travel as bytes, figures are the crawl's.
    shared: bool
    #: Every write of a flush lands in one atomic step (a message between two members of this
    #: process may be applied as soon as it is made).
    atomic: bool
    #: The records between checkpoints are written (else each write is a checkpoint).
    journaled: bool
    #: Requests sent to the store's server (0 for a store in this process).
    round_trips: int
    #: The errors of a store that does not answer (yet): the crawl waits for it.
    unanswered: tuple[type[BaseException], ...]

    def saved(self) -> dict[str, Any] | None:
        """What the crawl's creator recorded (spider, settings), or None for no crawl."""

    def open(self, config: CrawlConfig, meta: dict[str, Any]) -> bool:
        """Create the crawl (with ``meta``) or join it; whether this call created it."""

    def beat(self) -> FleetView:
        """Say this process is alive; the fleet as the store knows it."""

    def claim(self, k: int) -> Claim | None:
        """Lease member ``k`` (:data:`~scrapy_opic.opic.messages.POOL`: the pool) and load it,
        or None if another process owns it."""

    def flush(
        self,
        writes: list[Write],
        sends: list[Message],
        notes: list[Note],
        renew: dict[int, str],
        reads: dict[int, Any],
        wait: bool = False,
    ) -> Flushed:
        """One step: the writes, the messages and notes for the members of other processes,
        the leases of ``renew`` (member -> token) renewed, and the inboxes of ``reads``
        (member -> where to read from) read. ``wait``: return once it is durable."""

    def release(self, k: int, token: str) -> None:
        """Give up member ``k``'s lease (if still this process's)."""

    def judge(self, host: str, verdict: dict[str, Any]) -> None:
        """Keep ``verdict`` (JSON-ready) on ``host``'s validators, replacing the one kept; it
        lasts as long as the crawl (written with the next checkpoint, or at once)."""

    def verdicts(self) -> dict[str, dict[str, Any]]:
        """The verdicts kept, by host (as :meth:`judge` kept them, whichever process did)."""

    def figures(self, skip: Collection[int]) -> dict[str, float]:
        """A shared store: the crawl's figures as the members but ``skip`` last wrote them, the
        messages in their inboxes (``messages``), the processes (``workers``) and partitions in
        use (``partitions``) and the members not skipped (``others``). Else the store's own
        figures."""

    def snapshot(self) -> Any:
        """The crawl as one state, read back (see :mod:`scrapy_opic.export`)."""

    def close(self) -> None:
        """Leave the crawl: nothing more is written."""


class MemoryStore:
    """A crawl in this process's memory only: one partition, no state read or written."""

    location: str | None = None
    worker = "memory"
    shared = False
    atomic = True
    journaled = False
    round_trips = 0
    unanswered: tuple[type[BaseException], ...] = ()

    def __init__(self) -> None:
        self.config: CrawlConfig | None = None
        self._verdicts: dict[str, dict[str, Any]] = {}

    def saved(self) -> dict[str, Any] | None:
        return None

    def open(self, config: CrawlConfig, meta: dict[str, Any]) -> bool:
        self.config = config.replace(partitions=1)
        return True

    def beat(self) -> FleetView:
        return FleetView([self.worker], [0], {})

    def claim(self, k: int) -> Claim | None:
        assert self.config is not None and k != POOL
        part = Partition.new(k, self.config, journaled=False)
        return Claim(part, "", 0, True, True)

    def flush(
        self,
        writes: list[Write],
        sends: list[Message],
        notes: list[Note],
        renew: dict[int, str],
        reads: dict[int, Any],
        wait: bool = False,
    ) -> Flushed:
        return Flushed({w.k: Outcome(WRITTEN) for w in writes}, list(sends), [], {}, [])

    def release(self, k: int, token: str) -> None:
        pass

    def judge(self, host: str, verdict: dict[str, Any]) -> None:
        self._verdicts[host] = verdict

    def verdicts(self) -> dict[str, dict[str, Any]]:
        return dict(self._verdicts)

    def figures(self, skip: Collection[int]) -> dict[str, float]:
        return {}

    def snapshot(self) -> Any:
        raise StoreError("a crawl kept in memory has no state to read back")

    def close(self) -> None:
        pass
