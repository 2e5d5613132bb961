"""torch_musa._table: the one text-table renderer (plain and markdown)."""
from torch_musa._table import render


def test_plain_pads_aligns_and_rules():
    text = render(["name", "n", "note"], [["a", 1, "x"], ["long", 22, ""]], ["<", ">", "<"])
    assert text.splitlines() == ["name   n  note",
                                 "----  --  ----",
                                 "a      1  x",
                                 "long  22"]


def test_plain_without_rows_is_the_header():
    assert render(["a", "bc"], []) == "a  bc\n-  --"


def test_markdown_escapes_bars():
    assert render(["a", "b"], [["x|y", 2]], markdown=True).splitlines() == [
        "| a | b |", "|---|---|", "| x\\|y | 2 |"]


def test_wrap_continues_long_cells_on_following_lines():
    text = render(["id", "note"], [["a", "one two three four"], ["b", "x"]], wrap=[None, 9])
    assert text.splitlines() == ["id  note",
                                 "--  -------",
                                 "a   one two",
                                 "    three",
                                 "    four",
                                 "b   x"]


def test_wrap_needs_a_width_per_column():
    import pytest
    with pytest.raises(ValueError, match="wrap has 1 widths for a row of 2 cells"):
        render(["a", "b"], [["x", "y"]], wrap=[5])
