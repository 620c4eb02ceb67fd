"""The report from the jobs' records: a verdict per figure, then REPORT.md, index.html (figures
embedded, so the page is one self-contained file) and SUMMARY.md (the table alone, which
`--readme` puts into README.md)."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import fnmatch
import html
import os
import pathlib
import re
from collections.abc import Iterable
from typing import Any

from experiments.report import catalog
from experiments.report.run import Job, format_minutes, job_key
from landscape.engine import records

# A paper's section lists its figures in this order: non-reproductions first. "not judged": a
# --quick report's figure whose runs completed, at sizes too small to judge the paper's claims.
ORDER = ("not reproduced", "partly", "not run", "reproduced", "not judged", "not attempted")
ORDER_OF_COUNTS = (
    "reproduced",
    "partly",
    "not reproduced",
    "not run",
    "not judged",
    "not attempted",
)
MARK = {
    "reproduced": "reproduced",
    "partly": "partly",
    "not reproduced": "**not reproduced**",
    "not run": "not run",
    "not judged": "not judged",
    "not attempted": "not attempted",
}
README_START, README_END = "<!-- report summary: start -->", "<!-- report summary: end -->"


@dataclasses.dataclass
class Evidence:
    """What one run says about a figure."""

    job: Job
    claims: list[dict[str, Any]]  # the paper's claims of this figure (summary.json)
    sanity: list[dict[str, Any]]
    figures: list[pathlib.Path]


@dataclasses.dataclass
class Row:
    figure: catalog.Figure
    verdict: str
    passed: int
    total: int
    evidence: list[Evidence]
    judged: bool = True  # False at --quick sizes: claims evaluated, not judged

    @property
    def seconds(self) -> float | None:
        times = [e.job.seconds for e in self.evidence if e.job.seconds is not None]
        return sum(times) if times else None


def rows(
    figures: Iterable[catalog.Figure], jobs: dict[str, Job], scale: str, quick: bool
) -> list[Row]:
    return [row(f, jobs, "cpu" if quick else scale, quick) for f in figures]


def row(figure: catalog.Figure, jobs: dict[str, Job], scale: str, quick: bool) -> Row:
    runs = figure.runs_at(scale)
    if figure.not_attempted or not runs:
        return Row(figure, "not attempted", 0, 0, [], judged=not quick)
    evidence = [evidence_of(run, jobs[job_key(run, quick)]) for run in runs]
    claims = [c for e in evidence for c in e.claims]
    passed, total = sum(c["passed"] for c in claims), len(claims)
    ran = [e for e in evidence if e.job.status in ("complete", "reused")]
    if not ran or (quick and len(ran) < len(evidence)):
        verdict = "not run"
    elif quick:
        verdict = "not judged"  # evaluated at quick sizes: evidence of the pipeline only
    elif total and passed == total:
        verdict = "reproduced"
    elif passed == 0:
        verdict = "not reproduced"
    else:
        verdict = "partly"
    return Row(figure, verdict, passed, total, evidence, judged=not quick)


def evidence_of(run: catalog.Run, job: Job) -> Evidence:
    summary = job.summary() if job.status in ("complete", "reused") else None
    if summary is None:
        missing = dict(
            claim=f"the run did not complete ({job.status}): {job.message}",
            measured=None,
            expected="a complete run",
            passed=False,
            failed_run=True,
        )
        return Evidence(job, [missing] if job.status == "failed" else [], [], [])
    claims = [c for c in summary.get("claims", []) if c["claim"].startswith(run.match)]
    sanity = summary.get("sanity_checks", []) if not run.match else []
    pictures = sorted(
        p
        for p in (job.workdir / "figures").glob("*.png")
        if run.figures and fnmatch.fnmatch(p.stem, run.figures)
    )
    return Evidence(job, claims, sanity, pictures)


def claims_text(r: Row) -> str:
    """The claims column: reproduced of checked, or (at --quick sizes) how many were evaluated."""
    if not r.total:
        return "-"
    return f"{r.passed}/{r.total}" if r.judged else f"{r.total} evaluated"


def counted_text(r: Row) -> str:
    return f"{r.passed}/{r.total} claims" if r.judged else f"{r.total} claims evaluated"


def counts(table: list[Row]) -> dict[str, int]:
    return {v: sum(r.verdict == v for r in table) for v in ORDER}


# ----------------------------------------------------------------------------- Markdown


def quick_note(table: list[Row]) -> str:
    """What a --quick report skips, and why: it judges no paper claim, and some configs may
    not have run."""
    judged = [r for r in table if r.total]
    claims = sum(r.total for r in judged)
    not_run = sorted({e.job.spec for r in table for e in r.evidence if e.job.status == "not run"})
    note = (
        "**Quick sizes check the pipeline, not the papers.** Every config ran shrunk to a few "
        "steps (`experiments/report/catalog.py`, `QUICK`), so this report skips judging the "
        f"papers' claims: the {claims} claims of the {len(judged)} figures below are evaluated "
        "(each has a measured value) on runs too short to show the papers' effects, so each "
        "figure's verdict is *not judged*, whatever its checks gave. `python -m "
        "experiments.report` (CPU scale) judges them."
    )
    if not_run:
        note += f" Not run at all: {', '.join(not_run)} (see each one's reason below)."
    return note


def summary_markdown(table: list[Row], heading: str, quick: bool = False) -> str:
    """The table of every figure: verdict, claims reproduced, run time (at --quick sizes,
    under the note of what that skips)."""
    tally = counts(table)
    claims = sum(r.passed for r in table), sum(r.total for r in table)
    lines = [
        heading,
        "",
        *([quick_note(table), ""] if quick else []),
        f"{len(table)} figures and theorems"
        + (" at quick sizes (the pipeline checked, the papers not judged)" if quick else "")
        + ": "
        + ", ".join(f"{tally[v]} {v}" for v in ORDER_OF_COUNTS if tally[v])
        + (
            f"; {claims[1]} paper claims evaluated, none judged."
            if quick
            else f"; {claims[0]}/{claims[1]} of the paper claims checked reproduced."
        ),
        "",
        "| paper | figure | the paper's claim | verdict | claims | run time |",
        "|---|---|---|---|---|---|",
    ]
    for r in table:
        claims_cell = claims_text(r)
        time_cell = format_minutes(r.seconds) if r.seconds is not None else "-"
        verdict = MARK[r.verdict] + (
            f" ({r.figure.not_attempted})" if r.verdict == "not attempted" else ""
        )
        lines.append(
            f"| {r.figure.paper} | {r.figure.label} | {_cell(r.figure.claim)} | "
            f"{verdict} | {claims_cell} | {time_cell} |"
        )
    return "\n".join(lines) + "\n"


def report_markdown(table: list[Row], context: dict[str, Any], images: dict) -> str:
    out = [
        f"# What landscape reproduces ({context['scale']} scale)",
        "",
        context_line(context),
        "",
        summary_markdown(table, "## Summary", quick=context.get("quick", False)),
    ]
    for paper, title in catalog.PAPERS.items():
        section = sorted(
            (r for r in table if r.figure.paper == paper), key=lambda r: ORDER.index(r.verdict)
        )
        if not section:
            continue
        out += [f"## {title}", ""]
        for r in section:
            out += figure_markdown(r, images)
    return "\n".join(out)


def context_line(c: dict[str, Any]) -> str:
    version = c["version"]
    commit = (version["commit"] or "unknown")[:10] + (
        " (uncommitted changes)" if version["dirty"] else ""
    )
    line = (
        f"Generated {c['time']} by `{c['command']}` in {format_minutes(c['seconds'])} "
        f"({c['ran']} configs run, {c['reused']} reused; the configs' own wall times add up "
        f"to {format_minutes(c.get('run_seconds', 0.0))}). Code: commit {commit}, library "
        f"hash {version['code_hash']}, JAX {version['jax']}; backend {c['backend']}."
    )
    if c.get("quick"):
        line += " Quick sizes: every claim evaluated and every figure drawn, none judged."
    return line


def figure_markdown(r: Row, images: dict) -> list[str]:
    f = r.figure
    counted = f", {counted_text(r)}" if r.total else ""
    out = [f"### {f.label}: {r.verdict}{counted}", "", f"*The paper:* {f.claim}.", ""]
    if r.verdict == "not attempted":
        return out + [f"Not attempted: {f.not_attempted}.", ""]
    if r.verdict not in ("reproduced", "not judged") and f.reason:
        out += [f"*Known reason:* {f.reason}.", ""]
    for e in r.evidence:
        job = e.job
        time_text = format_minutes(job.seconds) if job.seconds is not None else "-"
        out += [
            f"`{job.command}` ({job.status}, {time_text}; config {job.config_hash or '-'}, "
            f"records `{job.workdir}`)",
            "",
        ]
        if job.status == "not run":
            out += [f"Not run: {job.message}", ""]
        for c in e.claims:
            out.append(
                f"- {_mark(c, r.judged)}: {c['claim']}; measured "
                f"{_value(c['measured'])}, expected {_value(c['expected'])}"
            )
        failed = [c for c in e.sanity if not c["passed"]]
        if e.sanity:
            out.append(
                f"- sanity checks of the run: {len(e.sanity) - len(failed)}/"
                f"{len(e.sanity)} passed"
                + "".join(
                    f"; **failed:** {c['claim']} (measured {_value(c['measured'])})" for c in failed
                )
            )
        out.append("")
        out += [f"![{f.label}: {p.stem}]({images[p]})" for p in e.figures if p in images]
        if e.figures:
            out.append("")
    return out


def _mark(claim: dict[str, Any], judged: bool) -> str:
    """A claim's mark: ok or **NO**; at --quick sizes, what its check gave, unjudged."""
    if claim.get("failed_run"):
        return "**run failed**"  # the pipeline's own failure, at any size
    if not judged:
        return "evaluated (check " + ("met" if claim["passed"] else "not met") + ", not judged)"
    return "ok" if claim["passed"] else "**NO**"


def _value(value: Any, limit: int = 160) -> str:
    text = records.format_value(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# ----------------------------------------------------------------------------- HTML

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;width:100%;font-size:14px}
td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top}th{background:#f3f3f3}
.reproduced{background:#e3f4e3}.partly{background:#fff4d6}
.not-reproduced{background:#fbe0e0}.not-run,.not-attempted{background:#eee;color:#666}
.not-judged{background:#eee;color:#666}li.unjudged{color:#555}
img{max-width:100%;border:1px solid #ddd;margin:4px 0}code{background:#f5f5f5;padding:1px 3px}
li.no{color:#a00}h3{margin-top:1.6em}.meta{color:#555;font-size:13px}
.quick{background:#fff4d6;padding:8px 10px;border:1px solid #e8d8a8}
"""


def report_html(table: list[Row], context: dict[str, Any]) -> str:
    e = html.escape
    tally = counts(table)
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>landscape: what reproduces ({e(context['scale'])})</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>What landscape reproduces ({e(context['scale'])} scale)</h1>",
        *([f"<p class='quick'>{_inline(quick_note(table))}</p>"] if context.get("quick") else []),
        f"<p class='meta'>{_inline(context_line(context))}</p>",
        "<p>" + ", ".join(f"{tally[v]} {v}" for v in ORDER_OF_COUNTS if tally[v]) + "</p>",
        "<table id='summary'><thead><tr><th>paper</th><th>figure</th><th>the paper's claim"
        "</th><th>verdict</th><th>claims</th><th>run time</th></tr></thead><tbody>",
    ]
    for r in table:
        time_cell = format_minutes(r.seconds) if r.seconds is not None else "-"
        out.append(
            f"<tr class='{_css(r.verdict)}'><td>{e(r.figure.paper)}</td>"
            f"<td><a href='#{_anchor(r)}'>{e(r.figure.label)}</a></td>"
            f"<td>{e(r.figure.claim)}</td><td>{e(r.verdict)}</td>"
            f"<td>{e(claims_text(r))}</td>"
            f"<td>{time_cell}</td></tr>"
        )
    out.append("</tbody></table>")
    for paper, title in catalog.PAPERS.items():
        section = sorted(
            (r for r in table if r.figure.paper == paper), key=lambda r: ORDER.index(r.verdict)
        )
        if section:
            out.append(f"<h2>{e(title)}</h2>")
            out += [figure_html(r) for r in section]
    out.append("</body></html>")
    return "\n".join(out)


def figure_html(r: Row) -> str:
    e, f = html.escape, r.figure
    counted = f", {counted_text(r)}" if r.total else ""
    out = [
        f"<h3 id='{_anchor(r)}' class='{_css(r.verdict)}'>{e(f.label)}: {e(r.verdict)}"
        f"{counted}</h3>",
        f"<p><i>The paper:</i> {e(f.claim)}.</p>",
    ]
    if r.verdict == "not attempted":
        return "\n".join(out + [f"<p>Not attempted: {e(f.not_attempted)}.</p>"])
    if r.verdict not in ("reproduced", "not judged") and f.reason:
        out.append(f"<p><i>Known reason:</i> {e(f.reason)}.</p>")
    for ev in r.evidence:
        job = ev.job
        time_text = format_minutes(job.seconds) if job.seconds is not None else "-"
        out.append(
            f"<p class='meta'><code>{e(job.command)}</code> ({e(job.status)}, "
            f"{time_text}; config {e(job.config_hash or '-')}, records "
            f"<code>{e(str(job.workdir))}</code>)</p>"
        )
        if job.status == "not run":
            out.append(f"<p>Not run: {e(job.message)}</p>")
        items = [
            f"<li class='{_li_class(c, r.judged)}'>{e(_mark(c, r.judged).replace('**', ''))}: "
            f"{e(c['claim'])}; measured {e(_value(c['measured']))}, expected "
            f"{e(_value(c['expected']))}</li>"
            for c in ev.claims
        ]
        failed = [c for c in ev.sanity if not c["passed"]]
        if ev.sanity:
            items.append(
                f"<li>sanity checks of the run: {len(ev.sanity) - len(failed)}/"
                f"{len(ev.sanity)} passed"
                + "".join(f"; <b>failed:</b> {e(c['claim'])}" for c in failed)
                + "</li>"
            )
        if items:
            out.append("<ul>" + "".join(items) + "</ul>")
        for p in ev.figures:
            data = base64.b64encode(p.read_bytes()).decode()
            out.append(f"<img alt='{e(f.label)}: {e(p.stem)}' src='data:image/png;base64,{data}'>")
    return "\n".join(out)


def _li_class(claim: dict[str, Any], judged: bool) -> str:
    if claim.get("failed_run"):
        return "no"
    return "unjudged" if not judged else "ok" if claim["passed"] else "no"


def _inline(text: str) -> str:
    """Markdown's `code` and **bold** spans as HTML in escaped text."""
    text = re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text))
    return re.sub(r"\*\*([^*]*)\*\*", r"<b>\1</b>", text)


def _css(verdict: str) -> str:
    return verdict.replace(" ", "-")


def _anchor(r: Row) -> str:
    return re.sub(r"[^a-z0-9]+", "-", f"{r.figure.paper} {r.figure.label}".lower()).strip("-")


# ----------------------------------------------------------------------------- files


REPORT_FILES = ("REPORT.md", "index.html", "SUMMARY.md")


def check_out(out: pathlib.Path, names: Iterable[str] = REPORT_FILES) -> records.Workdir | None:
    """The report's folder `out` (None while it does not exist), its manifest listing what
    reports wrote there: raises WorkdirError (one sentence) for a file at one of `names` that
    no report wrote, or that changed since (a draft, an edit): it is never replaced."""
    if not out.is_dir():
        return None
    workdir = records.Workdir(out)
    entries = records.read_entries(out)
    for name in names:
        target = out / name
        if not os.path.lexists(target):
            continue
        ours = target.is_file() and not target.is_symlink() and name in entries
        if not (ours and records.sha256_of(target).hexdigest() == entry_sha(entries, name)):
            raise records.WorkdirError(
                f"--out={out}: {target} was not written by a report (or changed since), and the "
                f"report writes its own {name} there: move that file out of {out} (it is never "
                "removed or replaced), or give another --out."
            )
    return workdir


def write(table: list[Row], context: dict[str, Any], out: pathlib.Path) -> dict[str, pathlib.Path]:
    """REPORT.md (figures copied beside it), index.html (figures embedded) and SUMMARY.md, each
    entered in `out`'s manifest: a file there that no report wrote is never replaced (one
    sentence, WorkdirError), and the figures an earlier report copied and this one does not are
    removed (those alone, unchanged)."""
    copies = {}
    for r in table:
        for e in r.evidence:
            for p in e.figures:
                copies[p] = f"figures/{e.job.workdir.name}/{p.name}"
    workdir = check_out(out, [*REPORT_FILES, *copies.values()]) or records.Workdir(out)
    entries = records.read_entries(out)
    stale = [
        name
        for name, entry in entries.items()
        if name.startswith("figures/") and name not in copies.values() and isinstance(entry, dict)
    ]
    for name in stale:
        target = out / name
        if target.is_file() and not target.is_symlink():
            if records.sha256_of(target).hexdigest() == entry_sha(entries, name):
                target.unlink()
    if stale:
        workdir.seal(gone=stale)
        for folder in sorted({(out / n).parent for n in stale}, key=lambda f: -len(f.parts)):
            with contextlib.suppress(OSError):
                folder.rmdir()  # an earlier report's folder, once empty
    images = {}
    for picture, name in copies.items():
        target = workdir.file(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        with records.atomic(target, "wb") as f:
            f.write(picture.read_bytes())
        workdir.seal(name)
        images[picture] = name
    texts = {
        "markdown": ("REPORT.md", report_markdown(table, context, images)),
        "html": ("index.html", report_html(table, context)),
        "summary": (
            "SUMMARY.md",
            summary_markdown(
                table,
                f"Reproduction summary ({context['scale']} scale, `{context['command']}`, "
                f"{context['time'][:10]}; the configs ran for "
                f"{format_minutes(context.get('run_seconds', 0.0))} on {context['backend']}):",
                quick=context.get("quick", False),
            ),
        ),
    }
    paths = {}
    for key, (name, text) in texts.items():
        paths[key] = workdir.file(name)
        with records.atomic(paths[key], "w") as f:
            f.write(text)
        workdir.seal(name)
    return paths


def entry_sha(entries: dict[str, Any], name: str) -> str | None:
    entry = entries.get(name)
    return entry.get("sha256") if isinstance(entry, dict) else None


def update_readme(readme: pathlib.Path, summary: str) -> bool:
    """Replace the text between README's report markers with `summary`; False without them."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return False
    readme.write_text(text[: start + len(README_START)] + "\n" + summary + text[end:])
    return True


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
