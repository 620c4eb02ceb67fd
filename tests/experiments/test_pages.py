"""The study pages' generated tables (`python -m tools.pages`): every committed page holds
exactly the tables its stored data gives, so a table edited by hand or a generator changed
without writing the pages again fails here. The generator against real records:
tests/markov/test_curvature_study.py."""

import json
import re

import pytest

from configs import wikitext
from tools import page_parts, pages, study_pages


@pytest.mark.parametrize("name", sorted(study_pages.PAGES))
def test_each_page_is_what_its_stored_data_gives(name):
    page = study_pages.PAGES[name].path(name)
    text = page.read_text()
    assert page_command(name) in text, "the page states its run's command"
    tables = study_pages.PAGES[name].tables(page_parts.stored(name))
    for table, markdown in tables.items():
        assert page_parts.between(text, table) == markdown.strip("\n"), (
            f"{page.name}'s table {table!r} is not what docs/studies/data/{name}.json gives: "
            f"python -m tools.pages (or, after a new run, "
            f"python -m tools.pages {name} WORKDIR)"
        )
    found = set(re.findall(r"<!-- table (.+?): start -->", text))
    assert found == set(tables), "every table marker on the page is one the generator writes"


def page_command(name: str) -> str:
    return study_pages.PAGES[name].command


def test_a_table_edited_by_hand_is_told_from_the_data(tmp_path, monkeypatch):
    """A changed digit, in the page or in the data, makes the page stale; writing the tables
    again restores exactly the committed page."""
    name = "markov_curvature"
    original = study_pages.PAGES[name].path(name).read_text()
    data = page_parts.stored(name)
    assert study_pages.page_text(name, data, original) == original
    edited = original.replace(
        page_parts.between(original, "markov seeds"), "| seed |\n|---|\n| 0 |"
    )
    assert edited != original and study_pages.page_text(name, data, edited) == original
    row = data["seeds"][0]
    row["lambda_min"] = row["lambda_min"] * 2 - 0.5
    assert study_pages.page_text(name, data, original) != original
    docs = page_parts.STUDIES.parent
    (tmp_path / "studies" / "data").mkdir(parents=True)
    for other in study_pages.PAGES:  # the committed pages and data, this page's table edited
        page = study_pages.PAGES[other].path(other)
        copy = tmp_path / page.relative_to(docs)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(edited if other == name else page.read_text())
        data = tmp_path / "studies" / "data" / f"{other}.json"
        data.write_text(page_parts.data_path(other).read_text())
    monkeypatch.setattr(page_parts, "STUDIES", tmp_path / "studies")
    assert study_pages.stale() == [name]
    written = tmp_path / "studies" / f"{name}.md"
    assert pages.main(["pages"]) == 0 and written.read_text() == original
    assert study_pages.stale() == []


def test_a_page_without_its_markers_and_a_wrong_command_are_one_sentence(capsys):
    with pytest.raises(ValueError, match="no <!-- table markov seeds: start -->"):
        page_parts.replace("no markers here", "markov seeds", "| a |")
    assert pages.main(["pages", "nowhere", "runs/x"]) == 2
    assert "the pages: markov_curvature" in capsys.readouterr().err
    assert pages.main(["pages", "markov_curvature", "/nonexistent/run"]) == 2
    assert "holds no finished run" in capsys.readouterr().err


def test_the_caption_names_the_records_and_the_devices_they_ran_on():
    """A float16 run rounds differently on another number of devices: the caption says where."""
    for count, said in ((1, " (1 cpu device)"), (2, " (2 cpu devices)"), (None, "")):
        data = {"ran_on": {"backend": "cpu", "device_count": count}}
        assert page_parts.caption(data, "x.csv") == f"\n\n*From the run's `x.csv`{said}.*"
    stored = page_parts.stored("markov_curvature")["ran_on"]
    page = study_pages.PAGES["markov_curvature"].path("markov_curvature").read_text()
    assert f"({stored['device_count']} {stored['backend']} devices)" in page


def test_the_wikitext_page_tells_a_reader_without_the_data_how_to_get_it():
    """Its run reads a folder outside the repository: the page names the config's default
    folder, where to download the splits, and the override for a folder elsewhere."""
    text = study_pages.PAGES["wikitext_curvature"].path("wikitext_curvature").read_text()
    assert f"`{wikitext.get_config('curvature').text.path}`" in text
    assert "github.com/pytorch/examples/tree/main/word_language_model/data/wikitext-2" in text
    assert "`valid.txt`" in text and "`test.txt`" in text and "--config.text.path=" in text


def test_the_trap_table_counts_and_orders_the_records(tmp_path):
    """Four runs of one cell (escape steps 100, 200, 300 and one trapped run): the cell says 1/4
    trapped with the cell's interval, and the median, quartiles and range of the three escapes;
    a depth against another is Fisher's exact test of their trapped counts."""
    from tools import trap_page

    header = "layers,precision,seed,trapped,escape_step\n"
    runs = "".join(
        f"{layers},float16 autocast,{seed},{step == ''},{step}\n"
        for layers in (1, 2)
        for seed, step in enumerate(("100", "200", "", "300"))
    )
    (tmp_path / "trap_runs.csv").write_text(header + runs)
    cells = "layers,precision,runs,trapped,wilson_low,wilson_high\n"
    cells += "1,float16 autocast,4,1,0.05,0.7\n2,float16 autocast,4,1,0.05,0.7\n"
    (tmp_path / "trap_cells.csv").write_text(cells)
    claim = {"claim": "1 layer: trapped", "expected": "interval > 1/2", "verdict": "reproduced"}
    (tmp_path / "summary.json").write_text(json.dumps({"claims": [claim]}))
    (tmp_path / "config.json").write_text(json.dumps({"provenance": {}}))
    tables = trap_page.trap_tables(trap_page.trap_extract(tmp_path))
    assert (
        "| 1 layer | 1/4 trapped [0.05, 0.70]; 3 escape, step 200 (quartiles 150-250, "
        in (tables["trap_cells"])
    )
    assert "range 100-300) |" in tables["trap_cells"]
    assert "| 1 against 2 layers: Fisher's exact test, two-sided | p = 1 |" in tables["trap_cells"]
    assert "| 1 layer: trapped | interval > 1/2 | **reproduced** |" in tables["trap_claims"]
