"""The package as users install it: the wheel built from this tree holds the package, its
``py.typed`` and its license, nothing else; installed (not editable) in a fresh virtual
environment it runs a crawl and a command from a project of its own."""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.project import Project
from tests.support.sites import Site, site_graph

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # (No build isolation: the build uses this environment's setuptools, offline.)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run([*cmd, "-w", str(out), str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deprecat" not in done.stderr.lower(), done.stderr[-3000:]
    (built,) = out.glob("scrapy_opic-*.whl")
    return built


def test_the_wheel_ships_the_package_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    package = [n for n in names if not n.startswith("scrapy_opic-")]
    assert all(n.startswith("scrapy_opic/") for n in package), package
    assert "scrapy_opic/py.typed" in names
    assert not [n for n in package if not n.endswith((".py", "py.typed"))]
    assert any(n.endswith("licenses/LICENSE") for n in names)


def test_the_installed_wheel_crawls_in_a_fresh_environment(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The dependencies come from this environment (a path line: its .pth files, among them
    # this tree's editable install, are not read), the package from the wheel alone.
    deps = [p for p in (sysconfig.get_paths()["purelib"], *site.getsitepackages()) if p]
    (Path(purelib) / "deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    done = subprocess.run(install, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    project = Project(tmp_path / "proj")

    def scrapy(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(python), "-m", "scrapy", *args],
            cwd=project.root,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )

    where = subprocess.run(
        [str(python), "-c", "import scrapy_opic; print(scrapy_opic.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert where.stdout.startswith(str(env_dir)), (where.stdout, where.stderr)
    with Site(site_graph(30, seed=1)) as s:
        crawl = scrapy("crawl", "site", "-a", f"start_url={s.url(0)}", "-s", "JOBDIR=job")
        assert crawl.returncode == 0, crawl.stderr[-3000:]
    top = scrapy("opic-top", "site", "-s", "JOBDIR=job", "-n", "3")
    assert top.returncode == 0 and "pages known" in top.stdout, top.stderr[-3000:]
