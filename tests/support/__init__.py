"""What the tests and the benchmarks share: the loopback sites and Redis servers they run
(:mod:`.sites`, :mod:`.changing_site`), the crawl runner they start in a process of its own
(:mod:`.crawl_runner`), a Scrapy project on disk (:mod:`.project`), the one factory of
frontiers over every backend (:mod:`.frontiers`) and the simulated fleet of the Redis store's
partition tests (:mod:`.fleet`). The benchmarks import it as a package (``python -m
benchmarks.NAME`` from the checkout's root)."""

from pathlib import Path

#: The crawl runner's script: ``[sys.executable, RUNNER, CONFIG.json]`` runs one crawl.
RUNNER = Path(__file__).with_name("crawl_runner.py")
