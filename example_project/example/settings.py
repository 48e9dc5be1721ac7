"""Settings of the example project: a plain Scrapy project plus the three OPIC lines."""

BOT_NAME = "example"
SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"

# scrapy-opic: crawl the most important pages first.
SCHEDULER = "scrapy_opic.OpicScheduler"
SPIDER_MIDDLEWARES = {"scrapy_opic.OpicSpiderMiddleware": 75}
DOWNLOADER_MIDDLEWARES = {"scrapy_opic.OpicDownloaderMiddleware": 540}

ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 8
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
