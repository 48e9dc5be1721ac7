"""Scrapy commands installed through the ``scrapy.commands`` entry point."""
