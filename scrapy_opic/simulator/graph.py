"""The simulator's link graphs: :mod:`scrapy_opic.opic.graph` (they moved there, beside the
engine, when the export started computing PageRank; this name stays for existing imports)."""

from ..opic.graph import Graph, from_edges, load_edge_list, power_law_graph, write_edge_list

__all__ = ["Graph", "from_edges", "load_edge_list", "power_law_graph", "write_edge_list"]
