"""The crawl's pool: the part of every partition's virtual cash that belongs to the pages of the
other partitions, paid to them (see :mod:`.partition`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .importance import CrawlView
from .journal import Member
from .messages import POOL, Figures, Message, Payout, Report

_Rates = dict[int, tuple[float, float]]  # partition -> (per live page, per page never fetched)


class Pool(Member):
    """A :class:`~.messages.Report` from partition ``k`` brings what it owes the other
    partitions: ``to_all`` by their live pages, ``to_unfetched`` by their pages never fetched
    (by their live pages where none has any), the teleport credit to each of them whole. What a
    partition is owed waits in :attr:`owed` until :meth:`pay`, which sends it in one
    :class:`~.messages.Payout` with the crawl's clock and sums. The pool keeps no journal: its
    owner writes it whole at every write."""

    def __init__(self) -> None:
        super().__init__(POOL, journaled=False)
        #: The endowment until a partition takes it, and what no partition can be paid yet.
        self.cash = 0.0
        #: Per partition: its last figures and the clock it made.
        self.figures: dict[int, Figures] = {}
        self.made: dict[int, float] = {}
        #: What the pool paid out (the virtual page's history beyond the partitions' own).
        self.paid = 0.0
        #: Per partition: ``[to all, to never fetched]`` owed and not yet sent.
        self.owed: dict[int, list[float]] = {}
        #: Per partition: ``[to all, to never fetched]`` it reported and the pool has not
        #: shared out yet (at its next :meth:`pay`).
        self.pending: dict[int, list[float]] = {}
        #: The teleport credit every page of the crawl has been given: what every
        #: partition's virtual page gave, as their reports said.
        self.teleport = 0.0
        #: Per partition: the crawl's clock when the pool last paid it.
        self.told: dict[int, float] = {}

    def state(self) -> dict[str, Any]:
        return {
            "cash": self.cash,
            "figures": dict(self.figures),
            "made": dict(self.made),
            "paid": self.paid,
            "owed": {k: list(v) for k, v in self.owed.items()},
            "pending": {k: list(v) for k, v in self.pending.items()},
            "teleport": self.teleport,
            "told": dict(self.told),
            "box": self.box.state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Pool:
        pool = cls()
        pool.cash = float(state["cash"])
        pool.figures = dict(state["figures"])
        pool.made = dict(state["made"])
        pool.paid = float(state["paid"])
        pool.owed = {k: list(v) for k, v in state["owed"].items()}
        pool.pending = {k: list(v) for k, v in state["pending"].items()}
        pool.teleport = float(state["teleport"])
        pool.told = dict(state["told"])
        pool.box.load(state["box"])
        return pool

    @property
    def clock(self) -> float:
        """The crawl's clock as the pool knows it: what every partition reported it made, and
        what the pool paid."""
        return sum(self.made.values()) + self.paid

    def _apply(self, m: Message) -> None:
        if not isinstance(m, Report):
            raise ValueError(f"the pool received a message {type(m).__name__}")
        self.made[m.src] = self.made.get(m.src, 0.0) + m.clock
        self.figures[m.src] = m.figures
        self.teleport += m.credit
        if m.to_all or m.to_unfetched:
            pending = self.pending.setdefault(m.src, [0.0, 0.0])
            pending[0] += m.to_all
            pending[1] += m.to_unfetched
        self._count()

    def _share(self) -> None:
        """Owe what the partitions reported (:attr:`pending`), and the pool's own cash, to
        the other partitions: partition ``k``'s ``to all`` by their live pages, its ``to never
        fetched`` by their pages never fetched (by their live pages if none has any); what a
        partition reported while no other is live waits. O(partitions) for all the reports
        together: with ``L_k`` the live pages of the partitions but ``k``, partition ``j`` is
        owed ``live_j * sum(a_k / L_k for k != j)`` (and likewise for pages never fetched);
        the rounding's remainder goes to the partition owed most, so that no cash is made or
        lost."""
        if self.cash > 0.0:
            self.pending.setdefault(POOL, [0.0, 0.0])[0] += self.cash
            self.cash = 0.0
        figures = self.figures
        live = {k: f.live for k, f in figures.items() if f.live > 0}
        if not self.pending or not live:
            return
        unf = {k: figures[k].unfetched for k in live if figures[k].unfetched > 0}
        rates, total = self._rates(live, unf)
        if total:
            self._owe(rates, total, live, unf)

    def _rates(self, live: dict[int, int], unf: dict[int, int]) -> tuple[_Rates, float]:
        """Per live partition ``j``, in order, what each of its live pages and of its pages
        never fetched is owed (``sum(a_k / L_k for k != j)``, and likewise), and the total
        shared; the reports made while no other partition is live stay :attr:`pending`."""
        total_live, total_unf = sum(live.values()), sum(unf.values())
        sum_a = sum_u = total = 0.0
        own = dict.fromkeys(live, (0.0, 0.0))
        waiting = {}
        for src, (a, u) in sorted(self.pending.items()):
            others = total_live - live.get(src, 0)
            if others <= 0:
                waiting[src] = [a, u]
                continue
            others_unf = total_unf - unf.get(src, 0)
            if others_unf <= 0:
                a, u = a + u, 0.0
            total += a + u
            x, y = a / others, (u / others_unf if u else 0.0)
            sum_a += x
            sum_u += y
            if src in live:
                own[src] = (x, y)
        self.pending = waiting
        return {k: (sum_a - x, sum_u - y) for k, (x, y) in sorted(own.items())}, total

    def _owe(self, rates: _Rates, total: float, live: dict[int, int], unf: dict[int, int]) -> None:
        """Owe the live partitions ``total`` at their ``rates``, the rounding's remainder to
        the partition owed most."""
        shared = 0.0
        most, most_k = -1.0, None
        for k, (ra, ru) in rates.items():
            a = max(0.0, live[k] * ra)
            u = max(0.0, unf.get(k, 0) * ru)
            if not (a or u):
                continue
            owed = self.owed.setdefault(k, [0.0, 0.0])
            owed[0] += a
            owed[1] += u
            shared += a + u
            if a + u > most:
                most, most_k = a + u, k
        if most_k is not None:
            self.owed[most_k][0] += total - shared
        self.paid += total

    def pay(self, only: Collection[int] | None = None) -> list[Message]:
        """Send what each partition is owed (of ``only``, if given), with the crawl's clock
        without that partition's part, and its view."""
        self._share()
        out: list[Message] = []
        clock = self.clock
        # Also to a live partition owed nothing whose clock lags the crawl's by 1%: a window
        # reads the crawl's clock.
        late = {
            k for k, f in self.figures.items() if f.live and self.told.get(k, 0.0) < 0.99 * clock
        }
        due = set(self.owed) | late
        if only is not None:
            due &= set(only)
        if not due:
            return out
        # The crawl's sums, once: a partition's view is them, with the other partitions'
        # live pages and pages never fetched.
        sums = [0.0] * 9
        for f in self.figures.values():
            for x in range(9):
                sums[x] += f[x]
        live, unf = int(sums[0]), int(sums[1])
        c, b, d, passed, dangling, norm = sums[3:9]
        for k in sorted(due):
            a, u = self.owed.pop(k, (0.0, 0.0))
            fig = self.figures.get(k)
            mine = (fig.live, fig.unfetched) if fig is not None else (0, 0)
            view = CrawlView(
                live - mine[0], unf - mine[1], int(sums[2]), c, b, d, passed, dangling, norm
            )._replace(teleport=self.teleport)
            self.told[k] = clock
            out.append(
                self._send(Payout, k, a, u, self.teleport, clock - self.made.get(k, 0.0), view)
            )
        self._count()
        return out

    def figures_dict(self) -> dict[str, float]:
        """The pool's figures (see :data:`~.fleet.FIGURES`): its cash, records, messages."""
        return {
            "virtual_cash": self.total_cash(),
            "records": self.records,
            "unconfirmed": len(self.box.unconfirmed),
        }

    def total_cash(self) -> float:
        """The pool's cash: what it holds and owes."""
        return (
            self.cash
            + sum(a + u for a, u in self.owed.values())
            + sum(a + u for a, u in self.pending.values())
        )

    def known_figures(self) -> dict[str, float]:
        """The crawl's figures as the partitions last reported them (G: the pool's clock)."""
        fs = self.figures.values()
        return {
            "visits": sum(f.visits for f in fs),
            "G": self.clock,
            "pages": sum(f.pages for f in fs),
            "fetched": sum(f.fetched for f in fs),
            "pending": sum(f.pending for f in fs),
            "virtual_cash": self.total_cash(),
        }
