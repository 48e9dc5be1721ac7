"""scrapy-opic: Adaptive OPIC (On-line Page Importance Computation) for Scrapy."""

__version__ = "0.1.0"
