"""The offline simulator (``python -m scrapy_opic.simulator``): the engine crawls a known link
graph and is compared with its exact PageRank. See :mod:`scrapy_opic.simulator.simulation`."""

from .simulation import Simulation, compare_to_pagerank, load_graph

__all__ = ["Simulation", "compare_to_pagerank", "load_graph"]
