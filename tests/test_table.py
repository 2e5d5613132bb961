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
