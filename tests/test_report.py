"""``scrapy opic-report``: one self-contained HTML page, checked in a real headless Chromium."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support.sites import Site
from tests.test_crawl import crawl, graph  # noqa: F401  (graph is a fixture)

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n"


def chromium() -> str:
    """The Chromium binary; CI installs Debian's package, so there a missing browser fails."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed")
    return path


def run_chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    # The flags keep Chromium off the network (this machine has none) and need no display.
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ]
    return subprocess.run([chromium(), *flags, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory, graph) -> Path:  # noqa: F811
    tmp = tmp_path_factory.mktemp("report")
    with Site(graph) as site:
        crawl(tmp, site.url(0), CONCURRENT_REQUESTS=4, OPIC_COMMIT_VISITS=20)
    proc = subprocess.run(
        ["scrapy", "opic-report", "site", "-o", "report.html"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return tmp / "report.html"


def test_report_is_self_contained(report, graph):  # noqa: F811
    text = report.read_text()
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', text)
    assert [alt for alt, _ in images] == ["importance distribution", "error factor over the crawl"]
    for _alt, data in images:
        assert base64.b64decode(data).startswith(PNG)
    # Nothing loaded from elsewhere: no scripts, stylesheets or images by URL.
    assert not re.search(r"<(script|link|iframe)\b", text)
    assert not re.search(r'src="(?!data:)', text)
    assert f'<td class="num">{graph.n:,}</td>' in text  # pages known
    assert text.count('<a href="http://127.0.0.1') == 25  # the top pages, linked


def test_report_renders_its_images_in_chromium(report, tmp_path):
    # A copy with a probe script appended: after load, it writes how many images decoded.
    probe = tmp_path / "probe.html"
    probe.write_text(
        report.read_text().replace(
            "</body>",
            "<script>addEventListener('load', () => { document.title = 'decoded:' + "
            "[...document.images].filter(i => i.complete && i.naturalWidth > 0).length + '/' + "
            "document.images.length; });</script></body>",
        )
    )
    proc = run_chromium(
        "--virtual-time-budget=5000", "--dump-dom", probe.as_uri(), profile=tmp_path / "p1"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", proc.stdout).group(1)
    assert title == "decoded:2/2", title

    shot = tmp_path / "shot.png"
    proc = run_chromium(
        f"--screenshot={shot}",
        "--window-size=1200,1600",
        "--hide-scrollbars",
        report.as_uri(),
        profile=tmp_path / "p2",
    )
    assert shot.exists(), proc.stderr[-2000:]
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (1600, 1200)
    # Not a blank page: plots and tables put many distinct colours on it.
    colours = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50
