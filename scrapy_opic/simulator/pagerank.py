"""The simulator's reference PageRank: :mod:`scrapy_opic.opic.pagerank` (it moved there, beside
the engine, when the export started computing PageRank; this name stays for existing imports)."""

from ..opic.pagerank import PowerIteration, pagerank, relative_error, top_mask

__all__ = ["PowerIteration", "pagerank", "relative_error", "top_mask"]
