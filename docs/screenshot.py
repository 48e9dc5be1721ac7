"""Make the documentation's pictures in headless Chromium (Debian's chromium package):
docs/report.png, the HTML report of the demo crawl stopped at a third of its site, and
docs/settings.png, the settings page of the documentation site as Sphinx builds it.

    python docs/screenshot.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
DEMO = DOCS.parent / "example_project" / "demo.py"


def shoot(page: Path, out: Path, profile: Path, size: str) -> None:
    """A screenshot of the local HTML file ``page``, ``size`` pixels (``WIDTH,HEIGHT``)."""
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--hide-scrollbars",
            f"--window-size={size}",
            f"--screenshot={out}",
            page.as_uri(),
        ],
        check=True,
    )
    print(f"wrote {out}")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.html"
        demo = [sys.executable, str(DEMO), "--pages", "3000", "--stop", "1000"]
        subprocess.run([*demo, "--report", str(report)], check=True)
        shoot(report, DOCS / "report.png", Path(tmp) / "profile", "1200,1500")
        html = Path(tmp) / "html"
        build = ["sphinx-build", "-q", "-W", "-c", str(DOCS), str(DOCS.parent), str(html)]
        subprocess.run(build, check=True)
        settings = html / "docs" / "_generated" / "settings.html"
        shoot(settings, DOCS / "settings.png", Path(tmp) / "profile", "1100,1400")
    # A page of text in 64 colours: a third of the bytes, no visible difference.
    from PIL import Image

    Image.open(DOCS / "settings.png").convert("RGB").quantize(64).save(
        DOCS / "settings.png", optimize=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
