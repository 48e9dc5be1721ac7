"""``python -m scrapy_opic.simulator``: see :mod:`scrapy_opic.simulator.simulation`."""

import sys

from .simulation import main

sys.exit(main())
