"""What a process knows of a member of its crawl that it owns, and how each write of it goes.

A :class:`Held` member has a lease token, a journal of some length in the store, batches of
records taken from it and not known written (kept until a write succeeds), inbox entries
applied (deleted with the next write) and a place to read its inbox from. The crawl asks it for
its next :class:`~.store.Write` (:meth:`Held.write`) and tells it how the write went
(:meth:`Held.written`): whether this process still owns the member.
"""

from __future__ import annotations

import time
from typing import Any

from ..opic.fleet import Fleet
from ..opic.journal import Member
from ..opic.messages import POOL, Message
from .store import FAILED, LOST, SHORT, Outcome, Write

#: A member's journal gets a new checkpoint after this many batches, or this many seconds.
CHECKPOINT_BATCHES = 200
CHECKPOINT_SECONDS = 60.0


class Held:
    """A member this process owns, with its write state (see the module docstring)."""

    def __init__(self, member: Member, token: str, log: int) -> None:
        self.member = member
        self.token = token
        self.log = log
        #: Batches of records taken from the member and not known written: ``(records,
        #: records made up to the batch's end)``.
        self.unwritten: list[tuple[list[Any], int]] = []
        self.consumed: list[Any] = []
        self.read_from: Any = "-"
        self.since_checkpoint = log
        self.checkpoint_at = time.monotonic()
        self.figures: dict[str, float] | None = None
        self.renew_at = 0.0
        #: Until when the lease is surely this process's, on its clock (the store's expiry is
        #: later: the lease was set or renewed after this process asked).
        self.valid_until = float("inf")
        self.leaving = False
        self.last_active = time.monotonic()
        #: When this process claimed the member (its clock).
        self.claimed_at = self.last_active

    def renewed(self, at: float, lease: float) -> None:
        """The lease was set or renewed by a call made at ``at`` (this process's clock): its
        next renewal is due at a third of it, well before it lapses."""
        self.renew_at = at + lease / 3
        self.valid_until = at + lease

    def write(
        self, k: int, journaled: bool, committing: bool, kept: dict | None, now: float
    ) -> Write | None:
        """Member ``k``'s write, if it has anything new: its journal's new batches, or a
        checkpoint (a store that does not journal, the pool, a member leaving, or a journal
        long or old enough); ``kept``: what it carries of the crawl."""
        member = self.member
        batch = member.take_journal()
        if batch:
            self.unwritten.append((batch, member.records))
        figures = member.figures_dict()  # type: ignore[attr-defined]
        if not self._news(figures, journaled, committing):
            return None
        self.figures = figures
        checkpoint = self._checkpoint_due(k, journaled, now)
        return Write(
            k,
            self.token,
            self.log,
            [] if checkpoint else [b for b, _ in self.unwritten],
            member if checkpoint else None,
            figures,
            list(self.consumed),
            kept,
        )

    def _news(self, figures: dict[str, float], journaled: bool, committing: bool) -> bool:
        """Whether the member has anything to write (a store that does not journal: a commit
        asked for writes a checkpoint in any case), or a journal to fold as it leaves."""
        m = self.member
        if self.unwritten or self.consumed or figures != self.figures:
            return True
        if not journaled and (m.records != m.durable or committing):
            return True
        return self.leaving and bool(self.log)

    def _checkpoint_due(self, k: int, journaled: bool, now: float) -> bool:
        """Whether member ``k``'s next write is a checkpoint (see :meth:`write`)."""
        if not journaled or k == POOL or (self.leaving and (self.unwritten or self.log)):
            return True  # (a member leaving: its next owner reads less)
        old = now - self.checkpoint_at >= CHECKPOINT_SECONDS
        return bool(self.unwritten) and (self.since_checkpoint >= CHECKPOINT_BATCHES or old)

    def written(self, w: Write, records: int, outcome: Outcome, lease: float, at: float) -> bool:
        """After the write ``w`` (made at ``at``, which renewed the lease if it landed), which
        makes the member's first ``records`` records durable: whether this process still owns
        it. A write that failed is made again at the next flush."""
        if outcome.status == FAILED:
            return True
        if outcome.status == LOST:  # another process holds the lease: this one stalled past it
            return False
        if outcome.status == SHORT:
            return self._landed(outcome.length)
        self.member.durable = records
        self.unwritten = []
        del self.consumed[: len(w.consumed)]
        self.renewed(at, lease)
        if w.checkpoint is not None:
            self.log = 0
            self.since_checkpoint = 0
            self.checkpoint_at = time.monotonic()
        else:
            self.since_checkpoint += outcome.length - self.log
            self.log = outcome.length
        return True

    def _landed(self, length: int) -> bool:
        """The journal is ``length`` batches long, not as long as this process thinks: batches
        of an earlier flush whose reply never came back did land (they are written: the rest
        goes next), or a restarted store lost writes (this process's state is not the store's
        any more: whether it may go on)."""
        landed = length - self.log
        if landed == 0:
            return True
        if not 0 < landed <= len(self.unwritten):
            return False
        self.member.durable = self.unwritten[landed - 1][1]
        del self.unwritten[:landed]
        self.log += landed
        self.since_checkpoint += landed
        return True

    def read_inbox(self, entries: list[tuple[Any, list[Message], list[Any]]], fleet: Fleet) -> None:
        """The member's inbox entries, delivered through ``fleet``; an entry is deleted with
        the next write, unless a message of it waits for an earlier one (read again then)."""
        keep = None  # the first entry with a message that waits for an earlier one
        for entry_id, messages, notes in entries:
            for n in notes:
                fleet.note(n)
            for m in messages:
                fleet.deliver(m)
            if keep is None:
                if any(self.member.box.waits(m) for m in messages):
                    keep = entry_id
                else:
                    self.consumed.append(entry_id)
            self.read_from = ("after", entry_id)
        if keep is not None:
            self.read_from = ("at", keep)


__all__ = ["Held"]
