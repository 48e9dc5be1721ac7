"""Make docs/report.png: the demo crawl stopped at a third of its site, its HTML report, and a
screenshot of the report in headless Chromium (Debian's chromium package).

    python docs/screenshot.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
DEMO = DOCS.parent / "example_project" / "demo.py"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.html"
        subprocess.run(
            [
                sys.executable,
                str(DEMO),
                "--pages",
                "3000",
                "--stop",
                "1000",
                "--report",
                str(report),
            ],
            check=True,
        )
        subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                f"--user-data-dir={tmp}/profile",
                "--hide-scrollbars",
                "--window-size=1200,1500",
                f"--screenshot={DOCS / 'report.png'}",
                report.as_uri(),
            ],
            check=True,
        )
    print(f"wrote {DOCS / 'report.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
