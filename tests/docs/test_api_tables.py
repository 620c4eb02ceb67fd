"""The API reference's summary tables (`python -m tools.api_tables`): every `:::` object
resolves and each page's table is its objects' docstrings, so the pages read on GitHub cannot go
stale."""

import pytest

from tools import api_tables, docstrings


@pytest.mark.parametrize("page", api_tables.pages(), ids=lambda p: p.stem)
def test_each_api_page_opens_with_the_current_table_of_its_objects(page):
    text = page.read_text()
    assert api_tables.START in text, f"{page.name}: no table; python -m tools.api_tables"
    assert api_tables.written(page) == text, f"{page.name}: stale; python -m tools.api_tables"
    names = api_tables.OBJECT.findall(text)
    assert names and all(f"| `{name}` |" in text for name in names)


def test_the_first_sentence_ends_at_a_sentence_not_an_abbreviation():
    def documented():
        """A curve (Garipov et al. 2018), e.g. a Bézier one | drawn. More here.

        And a second paragraph."""

    assert docstrings.first_sentence(documented) == (
        "A curve (Garipov et al. 2018), e.g. a Bézier one \\| drawn."
    )
    assert docstrings.first_sentence(lambda: None) == ""
    with pytest.raises(AttributeError):
        docstrings.resolve("landscape.engine.integrity.verify")  # where it no longer lives
