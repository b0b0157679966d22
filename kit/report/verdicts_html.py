"""The report's verdicts (kit.report.page): per notebook that recorded claims, a table to scan
(one row per condition: the claim's outcome as a badge, its effect and interval, the effect it
could detect, replicates and rounds), then each claim in one short sentence with its detail
folded under it, the line saying what ran, and what would decide the claims left undecided.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from kit.readout import numbers
from kit.report import outputs
from kit.report.labels import label

#: the stored verdict table of a notebook, by file name ending
VERDICT_ENDING = "_verdicts.parquet"


#: how the verdict statuses read
STATUS_CLASS = {
    "reproduced": "good",
    "contradicted": "bad",
    "inconclusive": "unsure",
    "untested (one budget)": "unsure",
    "depends on the budget": "unsure",
    "depends on the world": "unsure",
}
#: the notebooks' summaries in the notebooks' order, by the prefix of `<prefix>_summary.json`
#: (notebook 03's claims come before notebook 04's restatement of them)
SUMMARY_ORDER = ("toy", "evidence", "time_concat", "sweep")


def _summary_order(path: Path) -> tuple[int, str]:
    prefix = path.name.removesuffix(outputs.SUMMARY_SUFFIX)
    found = SUMMARY_ORDER.index(prefix) if prefix in SUMMARY_ORDER else len(SUMMARY_ORDER)
    return (found, path.name)


def verdicts(folder: Path, read: Callable[[Path], pl.DataFrame] = outputs.read_parquet) -> str:
    """Per notebook that recorded claims, in the notebooks' order: a table to scan (one row per
    condition of each claim: the claim's outcome as a badge, its effect and interval, the
    effect it could detect, replicates and rounds), then each claim in one short sentence
    (its detail folded under it), the line saying what ran and what would decide the rest.
    `read` reads a stored verdict table (kit.report.page's names the file it cannot read)."""
    lines = []
    for path in sorted(folder.glob(f"*{outputs.SUMMARY_SUFFIX}"), key=_summary_order):
        summary = json.loads(path.read_text())
        stated = outputs.statements(summary)
        stored = folder / path.name.replace(outputs.SUMMARY_SUFFIX, VERDICT_ENDING)
        if stated and stored.exists():
            lines.append(verdict_table(read(stored), summary, stored.name))
        claims = iter(outputs.claims(summary))
        for status, line in stated:
            if not status:
                lines.append(f'<p class="ran">{html.escape(line)}</p>')
            elif status == outputs.NEXT:
                lines.append(_claim_html(status, html.escape(line), [], path.name))
            else:
                short, detail = claim_sentence(next(claims))
                lines.append(_claim_html(status, html.escape(short), detail, path.name))
    return "".join(lines) or "<p>No notebook of this run recorded a verdict.</p>"


#: what a claim's folded detail is called
DETAIL = "the conditions and numbers in detail"


def claim_sentence(claim: dict[str, Any]) -> tuple[str, list[str]]:
    """A claim as a reader scans it: one short sentence (its title and how many rounds and
    replicates it took; a claim without a title, its line up to the detail) and the detail to
    fold under it (each condition in words, the reasons, the evidence of each cell, or the
    rest of its line)."""
    line = str(claim["line"])
    title = claim.get("title")
    short = f"{title}{claim.get('how', '')}" if title else line.split(" — ")[0]
    detail = [str(c) for c in claim.get("conditions") or claim.get("reasons") or []]
    detail += [str(e["line"]) for e in claim.get("evidence") or [] if isinstance(e, dict)]
    if not detail and short != line:
        detail = [line]
    return short, detail


def _claim_html(status: str, short: str, detail: list[str], source: str) -> str:
    """A claim's block: its status, its short sentence (HTML), its detail folded."""
    folded = (
        f"<details><summary>{DETAIL}</summary><ul>"
        + "".join(f"<li>{html.escape(item)}</li>" for item in detail)
        + "</ul></details>"
        if detail
        else ""
    )
    return (
        f'<div class="claim {STATUS_CLASS.get(status, "")}"><span class="status">'
        f"{html.escape(status)}</span>{short} <small>({html.escape(source)})</small>{folded}</div>"
    )


def _badge(status: str) -> str:
    return f'<span class="badge {STATUS_CLASS.get(status, "")}">{html.escape(status)}</span>'


def verdict_table(stored: pl.DataFrame, summary: dict[str, Any], name: str) -> str:
    """The conditions of a notebook's claims as one table a reader scans: claim, outcome badge,
    condition, effect [95% interval], detectable effect, replicates, and the rounds taken (with
    why they stopped where that is not the outcome beside it). A sweep's rows (one cell each,
    by world seed and budget) are badged with their own cell's outcome, not the sweep's."""
    claims = summary.get("claims") or [summary.get("claim") or {}]
    status = {c.get("claim"): c.get("status", "") for c in claims if isinstance(c, dict)}
    per_cell = {
        (c.get("world_seed"), c.get("budget")): c.get("status", "")
        for c in summary.get("cells") or []
        if isinstance(c, dict)
    }
    titles = {c.get("claim"): c.get("title") for c in claims if isinstance(c, dict)}
    only = claims[0].get("status", "") if len(claims) == 1 else ""  # a summary's one claim
    keys = [k for k in ("world_seed", "budget") if k in stored.columns]
    head = [label(k) for k in keys] + [
        "claim",
        "outcome",
        "condition",
        "effect [95% interval] (points)",
        "detectable at 80% power (points)",
        "replicates",
        "rounds",
    ]
    rows, before = [], None
    for row in stored.iter_rows(named=True):
        outcome = (
            per_cell.get((row["world_seed"], row["budget"]), "")
            if keys
            else status.get(row["claim"], only)
        )
        ran = numbers.counted(row["rounds"] or 1, "round") + (
            f", stopped: {row['stopped']}" if row["stopped"] not in (None, "", outcome) else ""
        )
        named = (*(row[k] for k in keys), row["claim"])
        cells = [html.escape(str(row[k])) for k in keys] + [
            "" if named == before else html.escape(titles.get(row["claim"]) or row["claim"]),
            _badge(outcome),
            html.escape(f"{row['condition']}: {row['judgement']}"),
            html.escape(
                f"{numbers.signed(row['mean'])} {numbers.interval(row['low'], row['high'])}"
            ),
            html.escape(numbers.number(row["detectable"], 1)),
            html.escape(numbers.number(row["replicates"])),
            html.escape(ran),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        before = named
    return (
        f'<div class="table"><table class="dataframe verdicts"><caption>Each claim\'s conditions '
        f'(<a href="{html.escape(name)}">{html.escape(name)}</a>); the sentences below say the '
        "same in words.</caption><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
