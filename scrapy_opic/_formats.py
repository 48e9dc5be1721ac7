"""The export file formats, by extension (light: the settings check ``OPIC_EXPORT`` with it)."""

from __future__ import annotations

from pathlib import Path

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".jl": "jsonl"}


def output_format(out: str, fmt: str | None = None) -> str:
    """``csv`` or ``jsonl``: ``fmt`` if given, else from the extension (``-`` = CSV);
    :class:`ValueError` for anything else."""
    if fmt is None:
        fmt = "csv" if out == "-" else FORMATS.get(Path(out).suffix.lower())
        if fmt is None:
            raise ValueError(
                f"unknown output format for {out!r}: use a .csv, .jsonl or .jl file (or --format)"
            )
    fmt = fmt.lower()
    if fmt in ("jl", "jsonlines"):
        fmt = "jsonl"
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"unknown output format {fmt!r}: use csv or jsonl")
    return fmt


__all__ = ["FORMATS", "output_format"]
