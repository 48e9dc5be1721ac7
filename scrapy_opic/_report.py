"""One self-contained HTML page about a crawl's OPIC state (``scrapy opic-report``).

The page holds: the crawl's figures and settings; the importance distribution (rank against
importance, log-log); the convergence of the error factor 1/G over the crawl, from the time
series the scheduler records at each commit; the top pages and the top hosts and domains. Plots
are drawn with matplotlib (Agg backend) and embedded as base64 PNG: the file opens anywhere with
no network and nothing beside it.
"""

from __future__ import annotations

import base64
import html
import io
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._backends import masked_url
from .export import OpicState, output_file
from .opic.change import ValidatorAudit

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.2em .6em;text-align:left}
tr:nth-child(even){background:#f6f6f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:1.5em;margin-top:1em}.plots figure{margin:0}
figcaption{font-size:.85em;color:#555;max-width:500px}
.url{max-width:640px;overflow-wrap:anywhere}
"""


def _figure_png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _plots(state: OpicState) -> list[tuple[str, str, str]]:
    """``(alt, caption, base64 png)`` for each plot."""
    # Figures without pyplot: no global backend switch, nothing left open in a notebook.
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    out = []
    # Page counts per importance bin (bounded memory at any size): a bin's rank is the number
    # of pages above it, so the points are the rank plot's, one per bin that has pages.
    edges, fetched, not_yet, other = state.distribution()
    mid = np.sqrt(edges[:-1] * edges[1:])
    above = np.cumsum((fetched + not_yet + other)[::-1])[::-1]  # pages in this bin or higher
    fig = Figure(figsize=(5.0, 3.6))
    ax = fig.subplots()
    for counts, label, alpha in (
        (fetched, "fetched", 1.0),
        (not_yet, "not fetched yet", 0.6),
        (other, "failed, gone or refused", 0.6),
    ):
        has = counts > 0
        if has.any():
            ax.loglog(above[has], mid[has], ".", ms=3, alpha=alpha, label=label)
    ax.set_xlabel("rank")
    ax.set_ylabel("importance")
    ax.set_title("Importance distribution")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    out.append(
        (
            "importance distribution",
            "Importance of every known page against its rank (log-log). A power law is a "
            "straight line; pages not fetched yet hold only the cash their parents paid them; "
            "pages whose fetch failed, that are gone or were refused (404, robots.txt...) keep "
            "the importance they had.",
            _figure_png(fig),
        )
    )

    series = state.series
    visits = np.array(series.column("visits") if len(series) else [])
    err = np.array(series.column("error_factor") if len(series) else [])
    ok = (visits > 0) & (err > 0)
    if ok.any():  # (a crawl without a visit yet has nothing to draw on log axes)
        fig = Figure(figsize=(5.0, 3.6))
        ax = fig.subplots()
        ax.loglog(visits[ok], err[ok], "-o", ms=3, label="error factor 1/G")
        ax.set_xlabel("visits")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: no overlaps
        ax.set_ylabel("1 / G")
        ax.set_title("Convergence over the crawl")
        ax.grid(True, which="both", alpha=0.3)
        ax2 = ax.twinx()
        ax2.plot(visits, series.column("pages"), color="tab:gray", lw=1, label="pages known")
        ax2.plot(visits, series.column("fetched"), color="tab:green", lw=1, label="fetched")
        ax2.set_ylabel("pages")
        lines = ax.get_lines() + ax2.get_lines()
        fig.legend(
            lines,
            [str(ln.get_label()) for ln in lines],
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=3,
            fontsize=8,
        )
        out.append(
            (
                "error factor over the crawl",
                "The error factor 1/G is the paper's upper bound on the error of the importance "
                "estimate; it falls as history accumulates (twice as fast under Greedy as under "
                "Random). A point every OPIC_COMMIT_SECONDS or when the visits doubled, at "
                "most 512.",
                _figure_png(fig),
            )
        )
    return out


def _link(url: str) -> str:
    """The URL, escaped; a link only for http(s): a crawled ``javascript:`` URL stays text."""
    text = html.escape(url)
    if url.lower().startswith(("http://", "https://")):
        return f'<a href="{html.escape(url, quote=True)}">{text}</a>'
    return text


def _table(headers: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for k, v in enumerate(row):
            cls = (
                ' class="num"' if k in numeric else (' class="url"' if headers[k] == "url" else "")
            )
            cells.append(f"<td{cls}>{v}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def build_report(state: OpicState, top: int = 25, title: str | None = None) -> str:
    """The HTML text of the report."""
    s = state.stats()
    spider = state.meta.get("spider") or "crawl"
    title = title or f"OPIC report: {spider}"
    figures = [
        ("pages known", f"{state.n:,}"),
        ("pages fetched", f"{int(s['fetched']):,}"),
        ("pages pending", f"{state.pending:,}"),
        ("visits", f"{int(s['visits']):,}"),
        ("clock G", f"{s['G']:.4f}"),
        ("error factor 1/G", f"{s['error_factor']:.5f}"),
        ("virtual page cash", f"{s['virtual_cash']:.6f}"),
        ("cash at visit × n", f"{s['cash_at_visit_x_n']:.3f}"),
        ("total cash", f"{state.total_cash():.12f}"),
    ]
    settings = state.meta.get("settings") or {}
    now = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    settings_rows = [[html.escape(k), html.escape(repr(v))] for k, v in sorted(settings.items())]
    plots = "".join(
        f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for alt, caption, png in _plots(state)
    )
    pages = _top_pages(state, top)
    freshness = _freshness(state)
    sites = _top_sites(state, top)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>State <code>{html.escape(masked_url(str(state.path)))}</code>, read {now}.
Importance is each page's share of all history (OPIC), normalised to sum 1 over known pages.</p>
<h2>The crawl</h2>
{_table(["figure", "value"], [[html.escape(a), b] for a, b in figures], {1})}
<div class="plots">{plots}</div>
<h2>Top pages</h2>
{pages}
{freshness}
{sites}
<h2>Settings</h2>
{_table(["setting", "value"], settings_rows, set())}
</body></html>
"""


def _top_pages(state: OpicState, top: int) -> str:
    """The table of the ``top`` most important pages (with their PageRank if the crawl kept
    its links, and their change rate if it refetched by freshness)."""
    pages = state.top(top)
    rows = [
        [
            str(k),
            f"{p.importance:.6f}",
            *([f"{p.pagerank:.6f}"] if state.links_kept else []),
            f"{p.cash:.3g}",
            str(p.visits),
            "yes" if p.fetched else "no",
            _link(p.url),
        ]
        for k, p in enumerate(pages, 1)
    ]
    heads = ["#", "importance", "cash", "visits", "fetched", "url"]
    if state.links_kept:  # the exact PageRank of the crawled graph, beside its estimate
        heads.insert(2, "pagerank")
    if state.changes_kept:
        heads.insert(-1, "changes/day")
        for row, p in zip(rows, pages):
            row.insert(-1, "" if p.change_rate is None else f"{p.change_rate:.3g}")
    return _table(heads, rows, set(range(len(heads) - 2)))


def _top_sites(state: OpicState, top: int) -> str:
    """The sections of the ``top`` most important hosts and registered domains."""
    sites = state.by_site()
    out = []
    for level in ("host", "domain"):
        rows = [
            [html.escape(x.site), f"{x.importance:.6f}", f"{x.pages:,}", f"{x.fetched:,}"]
            for x in sites
            if x.level == level
        ][:top]
        out.append(
            f"<h2>Top {level}s</h2>"
            + _table([level, "importance", "pages", "fetched"], rows, {1, 2, 3})
        )
    return "".join(out)


def _freshness(state: OpicState) -> str:
    """The section on change of a crawl that refetched by freshness ("" for another)."""
    summary = state.change_summary()
    if not summary:
        return ""
    at = summary["at"]
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if at == at else "never"
    rows = [
        [html.escape(label), f"{pages:,}", f"{weight:.4f}"]
        for label, pages, weight in summary["bands"]
    ]
    return (
        "<h2>Change</h2><p>Pages by the change rate their refetches showed (a smoothed maximum-"
        "likelihood estimate), with their share of importance. Expected importance-weighted "
        f"freshness of the copies at {when}: <b>{summary['freshness']:.3f}</b> (each page "
        "fresh with probability e<sup>-rate × age</sup>; a page never seen to change, with "
        "the chance that it is static or changed too slowly for its looks to show).</p>"
        + _table(["change rate", "pages", "importance"], rows, {1, 2})
        + _validators(state)
    )


def _validators(state: OpicState) -> str:
    """The hosts whose validators the crawl stopped trusting, and why ("" if none)."""
    rows = []
    for host, v in sorted((state.meta.get("validators") or {}).items()):
        try:
            if not ValidatorAudit().merge(host, v):  # (trusted again)
                continue
        except ValueError:  # (unreadable: the crawl judges the host again)
            continue
        why = []
        if v.get("false_304"):
            why.append("304 (unchanged) for pages that had changed")
        for kind, name in (("etag", "ETag"), ("last_modified", "Last-Modified")):
            agree, noisy, stale = (v.get("counts") or {}).get(kind, (0, 0, 0))
            if stale:
                why.append(
                    f"the same {name} for changed content ({stale} of {agree + noisy + stale})"
                )
            if noisy:
                why.append(
                    f"a new {name} for unchanged content ({noisy} of {agree + noisy + stale})"
                )
        lied = v.get("lied")
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(lied)) if lied else ""
        rows.append([html.escape(host), html.escape("; ".join(why)), since])
    if not rows:
        return ""
    return (
        "<p>Hosts whose validators disagree with their content: they are sent none (each "
        "refetch is a full download). A host that said a changed page was unchanged lied: "
        "what its pages were thought unchanged before it was found out is not counted in "
        "their change rates.</p>"
        + _table(["host", "what its validators did", "found lying"], rows, set())
    )


def write_report(state: OpicState, out: str | os.PathLike, top: int = 25) -> Path:
    """Write the report to ``out`` (through a temporary file: never half a page)."""
    if top < 0:
        raise ValueError("--top must be positive")
    text = build_report(state, top)
    target = Path(out)
    with output_file(target) as fh:
        fh.write(text)
    return target


__all__ = ["build_report", "write_report"]
