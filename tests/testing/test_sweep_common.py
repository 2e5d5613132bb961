"""torch_musa.testing.sweep_common's selection, shared by the sweeps' --ops and --modules."""
from types import SimpleNamespace

import pytest

from torch_musa.testing.sweep_common import name_list, pick_entries

ENTRIES = [SimpleNamespace(name=n, k=i) for i, n in enumerate(["add", "max", "max", "mul", "sum"])]


def test_names_pick_every_entry_of_each_name_in_database_order():
    assert [e.k for e in pick_entries(ENTRIES, ["sum", "max"], 2, "op_db")] == [1, 2, 4]


def test_without_names_every_nth_entry_from_the_offset():
    assert [e.k for e in pick_entries(ENTRIES, None, 2, "op_db")] == [0, 2, 4]
    assert [e.k for e in pick_entries(ENTRIES, None, 2, "op_db", offset=1)] == [1, 3]


def test_an_unknown_name_is_named_with_the_closest():
    with pytest.raises(ValueError, match=r"^not in op_db: mx \(closest: max\); sumx \(closest: sum\); "
                                         r"it has 4 names"):
        pick_entries(ENTRIES, ["add", "mx", "sumx"], 1, "op_db")


def test_name_list_splits_commas_and_drops_blanks():
    assert name_list(" add, max ,,") == ["add", "max"]
    assert name_list(None) is None and name_list("") is None
