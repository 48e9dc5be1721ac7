"""A bounded time series of a crawl's figures, kept in the state for reports.

Points are recorded at each commit. When the series is full, every other point is dropped and
from then on only every other commit is recorded, so that ``limit`` points always cover the whole
crawl at an even spacing whatever its length: O(limit) memory and bytes in each snapshot.
"""

from __future__ import annotations

FIELDS = (
    "elapsed",
    "visits",
    "G",
    "error_factor",
    "pages",
    "fetched",
    "pending",
    "virtual_cash",
)


class Series:
    """Points ``{field: value}`` over a crawl (fields: :data:`FIELDS`), at most ``limit``."""

    def __init__(self, limit: int = 512) -> None:
        if limit < 2:
            raise ValueError("limit must be at least 2")
        self.limit = limit
        self.points: list[tuple[float, ...]] = []
        self.stride = 1  # record one commit in `stride`
        self._skipped = 0

    def add(self, force: bool = False, **values: float) -> None:
        """Record a point, or skip it to keep the spacing of a thinned series; ``force`` keeps
        it anyway (the crawl's last point)."""
        self._skipped += 1
        if self._skipped < self.stride and not force:
            return
        self._skipped = 0
        self.points.append(tuple(float(values.get(f, 0.0)) for f in FIELDS))
        if len(self.points) >= self.limit:
            # Keep the newest point, and every other one back from it: the next point, one new
            # stride later, continues the even spacing.
            self.points = self.points[(len(self.points) - 1) % 2 :: 2]
            self.stride *= 2

    def last_elapsed(self) -> float:
        return self.points[-1][0] if self.points else 0.0

    def column(self, name: str) -> list[float]:
        k = FIELDS.index(name)
        return [p[k] for p in self.points]

    def as_list(self) -> list:
        """A plain value for the store: ``[fields, stride, points]``."""
        return [list(FIELDS), self.stride, [list(p) for p in self.points]]

    @classmethod
    def from_list(cls, data: list, limit: int = 512) -> Series:
        out = cls(limit)
        if data:
            fields, stride, points = data
            idx = [fields.index(f) if f in fields else None for f in FIELDS]
            out.stride = int(stride)
            out.points = [tuple(p[k] if k is not None else 0.0 for k in idx) for p in points]
        return out

    def __len__(self) -> int:
        return len(self.points)


__all__ = ["FIELDS", "Series"]
