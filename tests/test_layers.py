"""The package's layers, read from its source: who may import whom, and no import cycle.

    opic (the algorithm) <- simulator
    opic <- backends (sqlite, Redis) <- export <- report, commands
    opic, backends <- settings <- state <- scheduler <- middlewares, extensions <- addon

Every import counts, at module level or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "scrapy_opic"

#: Module prefix -> the scrapy_opic modules it may import (prefixes), and the outside packages it
#: must not import.
RULES = {
    "scrapy_opic.opic": (("scrapy_opic.opic",), ("scrapy", "twisted", "sqlitedict", "redis")),
    "scrapy_opic.simulator": (
        ("scrapy_opic.opic", "scrapy_opic.simulator"),
        ("scrapy", "twisted", "sqlitedict", "redis"),
    ),
    "scrapy_opic._backends": (
        ("scrapy_opic.opic", "scrapy_opic._backends", "scrapy_opic._series"),
        ("scrapy", "twisted"),
    ),
    "scrapy_opic._series": ((), ("scrapy",)),
    "scrapy_opic._formats": ((), ("scrapy",)),
    "scrapy_opic._settings": (
        ("scrapy_opic.opic", "scrapy_opic._backends", "scrapy_opic._formats"),
        ("scrapy", "twisted", "sqlitedict", "redis", "scrapy_opic._backends."),
    ),
    "scrapy_opic.export": (
        (
            "scrapy_opic.opic",
            "scrapy_opic._backends",
            "scrapy_opic._series",
            "scrapy_opic._formats",
        ),
        ("scrapy", "twisted"),
    ),
    "scrapy_opic._state": (
        ("scrapy_opic.opic", "scrapy_opic._backends", "scrapy_opic._settings"),
        (),
    ),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in PACKAGE.rglob("*.py")
}


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved; ``from X import
    y`` counts X, and X.y when that is a module of the package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in MODULES)
    return out


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_no_import_cycle():
    g = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g[node]):
            if state.get(nxt) == 1:
                # A package importing its own submodules is not a cycle of layers.
                if not nxt.startswith(node + ".") and not node.startswith(nxt + "."):
                    cycle = path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
                    pytest.fail("import cycle: " + " -> ".join(cycle))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])


@pytest.mark.parametrize("prefix", sorted(RULES))
def test_each_layer_imports_only_what_it_may(prefix):
    allowed, forbidden = RULES[prefix]
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if name != prefix and not name.startswith(prefix + "."):
            continue
        for mod in imports(path):
            if mod.startswith("scrapy_opic"):
                if mod in ("scrapy_opic", name) or mod.startswith(name + "."):
                    continue
                ok = any(mod == a or mod.startswith(a + ".") for a in allowed)
                assert ok, f"{name} imports {mod}"
            for bad in forbidden:
                hit = mod.startswith(bad) if bad.endswith(".") else mod.split(".")[0] == bad
                assert not hit or mod.startswith("scrapy_opic"), f"{name} imports {mod}"
            for bad in forbidden:
                if bad.startswith("scrapy_opic"):
                    assert not mod.startswith(bad), f"{name} imports {mod}"
