"""`python -m experiments.report`: the catalog, the verdicts, reuse, and the quick report end to
end (every claim evaluated, every figure drawn; not that the claims hold at toy size)."""

import dataclasses
import json
import pathlib
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

from experiments.report import catalog, run, write
from experiments.report import command as report_cli
from landscape.engine import records

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tiny_text(folder: pathlib.Path, size: int = 6000) -> pathlib.Path:
    """valid.txt / test.txt of `size` words (2/3 valid): the WikiText configs' splits at toy size
    (the quick configs), or big enough for the full configs' map chunk (size=120_000)."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in rng.zipf(1.5, size=size) % 300]
    folder.mkdir(parents=True, exist_ok=True)
    cut = 2 * size // 3
    for split, part in (("valid", words[:cut]), ("test", words[cut:])):
        lines = [" ".join(part[i : i + 12]) for i in range(0, len(part), 12)]
        (folder / f"{split}.txt").write_text("\n".join(lines))
    return folder


def _quick(tmp_path_factory, *only: str):
    tmp = tmp_path_factory.mktemp("report")
    text = f"text.path={tiny_text(tmp / 'text')}"
    argv = ["report", "--quick", f"--out={tmp / 'out'}", f"--runs={tmp / 'runs'}", f"--set={text}"]
    argv += [f"--only={','.join(only)}"] if only else []
    lines = []
    started = time.perf_counter()
    status = report_cli.main(argv, progress=lines.append)
    return dict(
        status=status,
        out=tmp / "out",
        runs=tmp / "runs" / "quick",
        lines=lines,
        seconds=time.perf_counter() - started,
        sets=[text],
    )


def _context(**changes):
    """The context a report states (a full CPU run, one run made), with `changes`."""
    return (
        dict(
            scale="cpu",
            command="python -m experiments.report",
            time=write.now(),
            seconds=3.0,
            version=dict(commit="0" * 40, dirty=False, code_hash="h", jax="x"),
            ran=1,
            reused=0,
            backend="cpu",
        )
        | changes
    )


def html_of(report) -> str:
    return (report["out"] / "index.html").read_text()


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    return _quick(tmp_path_factory)


@pytest.fixture(scope="module")
def quick_recall_report(tmp_path_factory):
    return _quick(tmp_path_factory, "recall")


@pytest.mark.slow
def test_quick_report_of_one_paper_runs_its_configs_and_writes_the_pages(quick_recall_report):
    """The default suite's report end to end, on the paper whose quick configs are cheapest
    (--only=recall); the slow test below runs every paper."""
    report = quick_recall_report
    assert report["status"] == 0, report["lines"]
    figures = [f for f in catalog.FIGURES if f.paper == "recall"]
    jobs = run.unique(run.plan(figures, "cpu", True, report["sets"], report["runs"].parent))
    assert jobs and not [j.error for j in jobs if j.error]
    for job in jobs:
        summary = json.loads((report["runs"] / job.workdir.name / "summary.json").read_text())
        assert summary["status"] == "complete" and summary["total"] >= 1, job.spec
    table = (report["out"] / "SUMMARY.md").read_text()
    for figure in figures:  # quick sizes evaluate every claim and judge none
        if not figure.not_attempted:
            assert re.search(
                rf"\| recall \| {re.escape(figure.label)} \| .* \| not judged \| \d+ evaluated \|",
                table,
            ), figure.label
    assert not re.search(r"\| (\*\*not reproduced\*\*|partly|reproduced) \|", table)
    markdown = (report["out"] / "REPORT.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert linked and all((report["out"] / link).stat().st_size > 1000 for link in linked)
    # at the top, before any verdict: what the quick sizes skip (every claim's judgement), why
    top = markdown[: markdown.index("| paper |")]
    claims = sum(int(m) for m in re.findall(r"\| (\d+) evaluated \|", table))
    judged = sum(not f.not_attempted for f in figures)
    assert f"skips judging the papers' claims: the {claims} claims of the {judged} figures" in top
    assert "at quick sizes (the pipeline checked, the papers not judged)" in table
    assert f"; {claims} paper claims evaluated, none judged." in table
    assert "**NO**" not in markdown and "class='not-reproduced'" not in html_of(report)


@pytest.mark.slow  # ~6 min on 2 cores; the one-paper report above runs by default
def test_quick_report_evaluates_every_claim_and_draws_every_figure(quick_report):
    assert quick_report["status"] == 0, quick_report["lines"]
    runs = quick_report["runs"]
    jobs = run.unique(run.plan(catalog.FIGURES, "cpu", True, quick_report["sets"], runs.parent))
    assert len(jobs) >= 30 and not [j.error for j in jobs if j.error]
    for job in jobs:
        summary = json.loads((runs / job.workdir.name / "summary.json").read_text())
        assert summary["status"] == "complete", job.spec
        claims = summary["claims"] + summary["sanity_checks"]
        assert summary["total"] >= 1, job.spec  # every config checks paper claims
        unevaluated = [c["measured"] for c in claims if "could not be evaluated" in c["claim"]]
        assert not unevaluated, (job.spec, unevaluated)
        for c in summary["claims"]:
            assert c["verdict"] in ("reproduced", "NOT reproduced") and c["measured"] is not None
        for figure in summary.get("figures", []):
            path = runs / job.workdir.name / "figures" / pathlib.Path(figure).name
            assert path.stat().st_size > 1000, figure
    pictures = sorted(runs.glob("*/figures/*.png"))
    assert len(pictures) >= 50 and all(p.stat().st_size > 1000 for p in pictures)

    out = quick_report["out"]
    table = (out / "SUMMARY.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == len(catalog.FIGURES) + 1  # the header and one per figure
    markdown = (out / "REPORT.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert linked and all((out / link).stat().st_size > 1000 for link in linked)
    html = (out / "index.html").read_text()
    assert html.count("<img ") == len(linked) and "Quick sizes" in markdown
    every = [f for f in catalog.FIGURES if not f.not_attempted]
    for figure in every:  # every figure row has a verdict from measured claims
        assert re.search(
            rf"\| {figure.paper} \| {re.escape(figure.label)} \| .* \| "
            r"(\*\*not reproduced\*\*|partly|reproduced) \| \d+/\d+ \|",
            table,
        ), figure.label
    progress = [line for line in quick_report["lines"] if line.startswith("[")]
    assert len(progress) == len(jobs) and "left" in progress[0]


@pytest.mark.slow
def test_index_html_in_headless_chromium(quick_report, tmp_path):
    """The page in a real browser: every embedded image decodes, one summary row per figure."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    page = (quick_report["out"] / "index.html").read_text()
    probe = (
        "<script>window.addEventListener('load', () => { const images = [...document.images];"
        " const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).length;"
        " const rows = document.querySelectorAll('#summary tbody tr').length;"
        " document.body.insertAdjacentHTML('beforeend', `<pre id='probe'>images=${"
        "images.length} broken=${broken} rows=${rows}</pre>`); });</script>"
    )
    (tmp_path / "probe.html").write_text(page.replace("</body>", probe + "</body>"))
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=20000",
            "--dump-dom",
            (tmp_path / "probe.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    found = re.search(r"images=(\d+) broken=(\d+) rows=(\d+)", dom)
    assert found, dom[-2000:]
    images, broken, rows = map(int, found.groups())
    assert images == page.count("<img ") > 0 and broken == 0
    assert rows == len(catalog.FIGURES)


# ----------------------------------------------------------------------------- the catalog


def test_catalog_covers_every_paper_and_every_config_resolves(tmp_path):
    labels = [(f.paper, f.label) for f in catalog.FIGURES]
    assert len(labels) == len(set(labels))
    assert {f.paper for f in catalog.FIGURES} == set(catalog.PAPERS)
    for paper in catalog.PAPERS:  # Fig. 1 of every paper is listed
        assert (paper, "Fig. 1") in labels
    text = [f"text.path={tiny_text(tmp_path / 'text', 120_000)}"]  # not ../shared: a fresh clone
    for scale in ("cpu", "paper"):
        jobs = run.unique(run.plan(catalog.FIGURES, scale, False, text, tmp_path))
        for job in jobs:  # only the WikiText paper variants may lack data (a full WikiText)
            assert not job.error or ("wikitext" in job.spec and "_paper" in job.spec), job.error
            assert job.cfg is None or job.config_hash
    for figure in catalog.FIGURES:
        assert bool(figure.not_attempted) != bool(figure.runs), figure.label
        assert figure.not_attempted or figure.runs_at("cpu"), figure.label


def test_quick_plan_shrinks_every_config_and_shares_identical_ones(tmp_path):
    full = run.plan(catalog.FIGURES, "cpu", False, [], tmp_path)
    quick = run.plan(catalog.FIGURES, "cpu", True, [], tmp_path)
    assert full.keys() == {k.removesuffix(" quick") for k in quick}
    for key, job in quick.items():
        if job.cfg is not None and "train" in job.cfg:
            assert job.cfg.train.num_steps < full[key.removesuffix(" quick")].cfg.train.num_steps
    theory = [j for k, j in quick.items() if "scan_snap_theory" in k]
    assert len({id(j) for j in theory}) == 1  # one job for its four figures


def test_set_applies_only_where_the_field_exists(tmp_path):
    jobs = run.plan(
        catalog.figures(("scan_snap", "recall")),
        "cpu",
        False,
        ["text.path=/nowhere", "flow.num_saves=500"],
        tmp_path,
    )
    wikitext = jobs["configs/wikitext.py:fig7"]
    assert "/nowhere" in wikitext.error and wikitext.cfg is None  # one sentence, not a crash
    assert jobs["configs/recall.py:first_jump"].cfg.flow.num_saves == 500
    assert "--config.flow.num_saves=500" in jobs["configs/recall.py:first_jump"].command
    assert "flow" not in jobs["configs/syn_small.py"].command


# ----------------------------------------------------------------------------- verdicts, reuse


def fake_job(tmp_path, name, claims, status="complete", sanity=()):
    workdir = tmp_path / name
    (workdir / "figures").mkdir(parents=True)
    summary = {
        "status": "complete",
        "claims": [
            {"claim": text, "measured": 1.0, "expected": 1.0, "passed": ok} for text, ok in claims
        ],
        "sanity_checks": [
            {"claim": t, "measured": 0, "expected": 0, "passed": ok} for t, ok in sanity
        ],
    }
    (workdir / "summary.json").write_text(json.dumps(summary))
    (workdir / "figures" / "fig3_a.png").write_bytes(b"png")
    (workdir / "figures" / "fig8_b.png").write_bytes(b"png")
    return run.Job(
        f"configs/{name}.py",
        "scan_snap",
        [],
        workdir,
        config_hash="abc",
        status=status,
        seconds=2.0,
        message="boom" if status == "failed" else "",
    )


@pytest.mark.parametrize(
    "outcomes, verdict",
    [([True, True], "reproduced"), ([True, False], "partly"), ([False, False], "not reproduced")],
)
def test_verdict_counts_the_paper_claims(outcomes, verdict, tmp_path):
    job = fake_job(tmp_path, "a", [(f"claim {i}", ok) for i, ok in enumerate(outcomes)])
    figure = catalog.Figure("scan_snap", "Fig. 4", "x", (catalog.Run("configs/a.py"),))
    r = write.row(figure, {"configs/a.py": job}, "cpu", False)
    assert (r.verdict, r.passed, r.total) == (verdict, sum(outcomes), len(outcomes))


@pytest.mark.parametrize("outcomes", [[True, True], [True, False], [False, False]])
def test_a_quick_report_judges_no_claim_and_a_full_one_does(outcomes, tmp_path):
    """The same records: a full report's verdict counts the claims; at --quick sizes the figure
    is "not judged" (grey), its claims listed as evaluated, never red."""
    job = fake_job(tmp_path, "a", [(f"claim {i}", ok) for i, ok in enumerate(outcomes)])
    figure = catalog.Figure("scan_snap", "Fig. 4", "x", (catalog.Run("configs/a.py"),))
    full = write.row(figure, {"configs/a.py": job}, "cpu", False)
    quick = write.row(figure, {"configs/a.py quick": job}, "cpu", True)
    assert full.verdict == ("reproduced", "partly", "not reproduced")[outcomes.count(False)]
    assert (quick.verdict, quick.passed, quick.total) == ("not judged", sum(outcomes), 2)
    summary = write.summary_markdown([quick], "", quick=True)
    assert "| scan_snap | Fig. 4 | x | not judged | 2 evaluated |" in summary
    assert "2 paper claims evaluated, none judged." in summary
    context = _context(scale="quick", command="python -m experiments.report --quick", quick=True)
    markdown = write.report_markdown([quick], context, {})
    assert "### Fig. 4: not judged, 2 claims evaluated" in markdown and "**NO**" not in markdown
    assert markdown.count("- evaluated (check ") == 2
    html = write.report_html([quick], context)
    assert "<tr class='not-judged'>" in html and "class='no'" not in html
    assert ".not-judged{background:#eee;color:#666}" in html  # grey, as not run
    failed = fake_job(tmp_path, "f", [], status="failed")  # a quick run that failed: not run
    r = write.row(figure, {"configs/a.py quick": failed}, "cpu", True)
    assert r.verdict == "not run"
    assert "- **run failed**: the run did not complete (failed): boom" in "\n".join(
        write.figure_markdown(r, {})
    )


def test_match_selects_a_figures_claims_and_pictures_and_failures_count(tmp_path):
    job = fake_job(
        tmp_path, "t", [("Fig. 3: a", True), ("Fig. 8: b", False)], sanity=[("s", False)]
    )
    jobs = {"configs/t.py": job}
    fig3 = write.row(
        catalog.Figure(
            "scan_snap",
            "Fig. 3",
            "x",
            (catalog.Run("configs/t.py", match="Fig. 3", figures="fig3*"),),
        ),
        jobs,
        "cpu",
        False,
    )
    assert (fig3.verdict, fig3.total) == ("reproduced", 1)
    assert [p.name for p in fig3.evidence[0].figures] == ["fig3_a.png"]
    failed = fake_job(tmp_path, "f", [], status="failed")
    both = write.row(
        catalog.Figure(
            "scan_snap", "Fig. 4", "x", (catalog.Run("configs/t.py"), catalog.Run("configs/f.py"))
        ),
        {"configs/t.py": job, "configs/f.py": failed},
        "cpu",
        False,
    )
    assert (both.verdict, both.passed, both.total) == ("partly", 1, 3)  # the failed run counts
    not_run = run.Job(
        "configs/n.py", "scan_snap", [], tmp_path / "n", status="not run", message="no data"
    )
    r = write.row(
        catalog.Figure("scan_snap", "Fig. 7", "x", (catalog.Run("configs/n.py"),)),
        {"configs/n.py": not_run},
        "cpu",
        False,
    )
    assert r.verdict == "not run"
    context = _context(ran=2)
    markdown = write.report_markdown([fig3, both, r], context, {})
    assert (
        markdown.index("### Fig. 4: partly")
        < markdown.index("### Fig. 7: not run")
        < markdown.index("### Fig. 3: reproduced")
    )  # failures first
    assert "**failed:** s" in markdown and "Not run: no data" in markdown


def test_reuse_needs_the_same_config_code_and_jax(tmp_path):
    job = fake_job(tmp_path, "r", [("c", True)])
    version = dict(commit="c", dirty=False, code_hash="code1", jax="0.1")
    assert not run.reusable(job, version)  # no report.json yet
    stamp = dict(version, config_hash="abc", seconds=12.0)
    (job.workdir / "report.json").write_text(json.dumps(stamp))
    assert run.reusable(job, version) and run.previous_seconds(job) == 12.0
    assert not run.reusable(job, dict(version, code_hash="code2"))
    assert not run.reusable(job, dict(version, jax="0.2"))
    assert not run.reusable(dataclasses.replace(job, config_hash="other"), version)
    assert run.code_version()["code_hash"] == run.code_version()["code_hash"]


def test_time_left_scales_earlier_times_by_this_runs_speed():
    a, b, c = (run.Job(f"configs/{n}.py", "recall", [], pathlib.Path(n)) for n in "abc")
    estimates = {id(a): 10.0, id(b): 20.0, id(c): None}
    assert run.time_left([b, c], estimates, [(20.0, 10.0)]) == pytest.approx(2 * 20 + 20)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--only=scan_snap,hopfield"], "--only=hopfield: the papers are scan_snap"),
        (["--set=text.path"], "--set=text.path: give FIELD=VALUE"),
        (["--quick", "--readme"], "--readme takes a full report's table"),
        (["--scale=tpu"], "--scale"),
        (["--out=README.md"], "--out=README.md is a file, not a folder"),
        (["--out=."], "--out=. is a source tree (it holds .git)"),
        (["--runs=/"], "--runs=/ is /, a system folder"),
    ],
)
def test_usage_errors_are_one_sentence(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert report_cli.main(["report"] + argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_list_prints_the_plan_without_running(tmp_path, capsys):
    assert report_cli.main(["report", "--list", "--only=recall", f"--runs={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert out.count("python -m experiments.recall --config=configs/recall.py") == 7
    assert "(to run)" in out and not any(tmp_path.iterdir())


def test_readme_block_is_replaced_between_its_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{write.README_START}\nold\n{write.README_END}\nrest\n")
    assert write.update_readme(readme, "| new |\n")
    assert readme.read_text() == (
        f"intro\n{write.README_START}\n| new |\n{write.README_END}\nrest\n"
    )
    (tmp_path / "plain.md").write_text("no markers")
    assert not write.update_readme(tmp_path / "plain.md", "x")


# ----------------------------------------------------------------------------- the site's copy


def _png(path: pathlib.Path, width: int, color: int) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    ramp = np.linspace(0, 255, width, dtype=np.uint8)  # a plot-like image: smooth, compressible
    pixels = np.stack([np.tile(ramp, (width // 2, 1))] * 3, axis=-1)
    pixels[:, :, 0] = color
    Image.fromarray(pixels).save(path)


def test_docs_figures_take_the_cpu_records_else_the_quick_ones_and_say_so(tmp_path):
    from experiments.report import docs

    runs, site = tmp_path / "runs", tmp_path / "docs"
    cpu = run.plan(catalog.FIGURES, "cpu", False, [], runs)
    quick = run.plan(catalog.FIGURES, "cpu", True, [], runs)
    fig5 = next(f for f in catalog.FIGURES if f.paper == "markov" and f.label == "Fig. 5")
    stages = next(f for f in catalog.FIGURES if f.paper == "recall" and f.label == "Fig. 4")
    # Fig. 5 has CPU-scale records (and quick ones), the stages only quick ones
    _png(cpu[run.job_key(fig5.runs[0], False)].workdir / "figures" / "test_loss.png", 3000, 1)
    _png(quick[run.job_key(fig5.runs[0], True)].workdir / "figures" / "test_loss.png", 400, 2)
    _png(quick[run.job_key(stages.runs[0], True)].workdir / "figures" / "stages0.png", 400, 3)
    _png(quick[run.job_key(stages.runs[0], True)].workdir / "figures" / "other.png", 400, 4)
    written = docs.docs_figures(runs, docs=site, progress=lambda line: None)
    names = sorted(p.relative_to(site).as_posix() for p in written)
    assert names == [
        "figures/markov/markov_fig5.test_loss.png",
        "figures/recall/recall_stages.stages0.quick.png",  # not "other": not chosen
    ]
    from PIL import Image

    with Image.open(site / names[0]) as big:
        width = big.width
    assert width == docs.MAX_WIDTH and (site / names[0]).stat().st_size <= docs.MAX_KB * 1024
    # once the stages have CPU-scale records, their quick copy goes
    _png(cpu[run.job_key(stages.runs[0], False)].workdir / "figures" / "stages0.png", 400, 5)
    docs.docs_figures(runs, docs=site, progress=lambda line: None)
    assert sorted(p.name for p in (site / "figures" / "recall").iterdir()) == [
        "recall_stages.stages0.png"
    ]


def test_the_home_page_table_links_each_row_to_its_figure(tmp_path):
    from experiments.report import docs

    (tmp_path / "papers").mkdir()
    (tmp_path / "papers" / "markov.md").write_text("# Markov\n\n### Fig. 1\n\n### Thms 1-3\n")
    readme, index = tmp_path / "README.md", tmp_path / "index.md"
    readme.write_text(
        f"{write.README_START}\n| paper | figure |\n|---|---|\n| markov | Fig. 1 | a | b |\n"
        f"| markov | Fig. 2 | c | d |\n| markov | Thms 1-3 | e | f |\n{write.README_END}\n"
    )
    index.write_text(f"# Home\n\n{docs.INDEX_START}\nold\n{docs.INDEX_END}\n\nmore\n")
    assert docs.update_index(readme, index, tmp_path)
    page = index.read_text()
    assert "old" not in page and page.endswith("\nmore\n")
    assert "| [markov](papers/markov.md) | [Fig. 1](papers/markov.md#fig-1) | a | b |" in page
    assert (
        "| [markov](papers/markov.md) | [Fig. 2](papers/markov.md) | c | d |" in page
    )  # no section
    assert "[Thms 1-3](papers/markov.md#thms-1-3)" in page


def test_the_report_never_replaces_or_removes_a_file_it_did_not_write(tmp_path, capsys):
    """A draft REPORT.md and a hand-made figure in --out: the report refuses before it runs
    anything (one sentence naming the draft); moved away, it writes beside the figure, replaces
    and removes only its own files, and refuses a file of its own the user edited since."""
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "mine.png").write_bytes(b"my figure")
    (out / "REPORT.md").write_text("my draft")
    argv = ["report", "--quick", "--only=recall", f"--out={out}", f"--runs={tmp_path / 'runs'}"]
    assert report_cli.main(argv, progress=lambda line: None) == 2
    err = capsys.readouterr().err.strip()
    assert f"{out / 'REPORT.md'} was not written by a report" in err and "\n" not in err
    assert "--" not in err.replace("--out", "") and not (tmp_path / "runs").exists()
    (out / "REPORT.md").rename(tmp_path / "draft.md")
    job = fake_job(tmp_path, "a", [("claim", True)])
    figure = catalog.Figure("scan_snap", "Fig. 3", "x", (catalog.Run("configs/a.py"),))
    context = _context(seconds=1.0)
    table = [write.row(figure, {"configs/a.py": job}, "cpu", False)]
    (out / "figures" / "a").mkdir()
    (out / "figures" / "a" / "fig3_a.png").write_bytes(b"mine too")  # where a copy goes
    with pytest.raises(records.WorkdirError, match=r"a/fig3_a.png was not written by a report"):
        write.write(table, context, out)
    (out / "figures" / "a" / "fig3_a.png").unlink()
    write.write(table, context, out)
    assert sorted(p.name for p in (out / "figures" / "a").iterdir()) == ["fig3_a.png", "fig8_b.png"]
    (job.workdir / "figures" / "fig8_b.png").unlink()  # the next report has one figure less
    table = [write.row(figure, {"configs/a.py": job}, "cpu", False)]
    write.write(table, context, out)
    assert (out / "figures" / "mine.png").read_bytes() == b"my figure"
    assert sorted(p.name for p in (out / "figures" / "a").iterdir()) == ["fig3_a.png"]
    (out / "SUMMARY.md").write_text("edited by hand")
    with pytest.raises(records.WorkdirError, match=r"SUMMARY.md was not written by a report"):
        write.write(table, context, out)
    assert (out / "SUMMARY.md").read_text() == "edited by hand"
    assert (out / "figures" / "mine.png").read_bytes() == b"my figure"


def test_the_report_never_replaces_a_log_it_did_not_write(tmp_path):
    """<runs>/<label>/<config>.log holds a run's output: a file of the user's there fails that
    job in one sentence, unchanged; a log the report wrote (its first line says so) is its own."""
    job = run.Job("configs/syn_small.py", "scan_snap", [], tmp_path / "syn_small_fig4")
    log = tmp_path / "syn_small_fig4.log"
    log.write_text("my notes on this run\n")
    assert run.execute(job, run.code_version()) == 2
    assert job.status == "failed" and "syn_small_fig4.log was not written by the report" in (
        job.message
    )
    assert log.read_text() == "my notes on this run\n" and not job.workdir.exists()
    log.write_text(f"{run.LOG_HEADER}{job.command}\nstep 10 ...\n")
    assert run.ours(log) and run.ours(tmp_path / "none.log")
