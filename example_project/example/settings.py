"""Settings of the example project: a plain Scrapy project plus the one OPIC line."""

BOT_NAME = "example"
SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"

# scrapy-opic: crawl the most important pages first.
ADDONS = {"scrapy_opic.Addon": 0}

ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 8
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
