"""torch.musa.set_sync_debug_mode as torch.cuda's: synchronising operations warn or raise;
asynchronous ones and an explicit device synchronize do not."""
import warnings

import pytest
import torch

import torch_musa  # noqa: F401


@pytest.fixture
def mode():
    yield
    torch.musa.set_sync_debug_mode(0)


def _sync_warnings(fn):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        fn()
    return [w for w in rec if "called a synchronizing MUSA operation" in str(w.message)]


def test_modes_and_spellings(mode):
    assert torch.musa.get_sync_debug_mode() == 0
    for spelling, value in (("warn", 1), ("error", 2), ("default", 0), (1, 1), (2, 2), (0, 0)):
        torch.musa.set_sync_debug_mode(spelling)
        assert torch.musa.get_sync_debug_mode() == value
    with pytest.raises(RuntimeError, match="expected one of `default`, `warn`, `error`"):
        torch.musa.set_sync_debug_mode("loud")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.musa.set_sync_debug_mode(3)


def test_synchronising_operations_warn(mode):
    a = torch.rand(8, device="musa")
    torch.musa.set_sync_debug_mode("warn")
    for name, fn in {
        "item": lambda: a[0].item(),
        "cpu": lambda: a.cpu(),
        "nonzero": lambda: torch.nonzero(a),
        "bool mask": lambda: a[a > 0.5],
        "masked_select": lambda: torch.masked_select(a, a > 0.5),
        "unique": lambda: torch.unique(a),
        "from host": lambda: torch.ones(2).to("musa"),
        "stream synchronize": lambda: torch.musa.current_stream().synchronize(),
    }.items():
        assert len(_sync_warnings(fn)) >= 1, name


def test_asynchronous_operations_are_silent(mode):
    a = torch.rand(8, device="musa")
    idx = torch.tensor([0, 3], device="musa")
    pinned = torch.empty(8).pin_memory()
    torch.musa.set_sync_debug_mode("warn")
    for name, fn in {
        "add": lambda: a + 1,
        "clone": lambda: a.clone(),
        "integer index": lambda: a[idx],
        "non_blocking to host": lambda: pinned.copy_(a, non_blocking=True),
        "device synchronize": lambda: torch.musa.synchronize(),
        "event synchronize": lambda: torch.musa.Event().synchronize(),
        # Empty copies move nothing (Hugging Face's cache makes two per layer and step).
        "empty from host": lambda: torch.tensor([], device="musa"),
        "empty to host": lambda: a[:0].cpu(),
    }.items():
        assert _sync_warnings(fn) == [], name


def test_empty_copies_still_check_shapes(mode):
    torch.musa.set_sync_debug_mode("error")
    dst = torch.empty(0, 4, device="musa")
    dst.copy_(torch.empty(0, 4))  # moves nothing: no error for a wait that does not happen
    for bad in (torch.empty(0, 3), torch.empty(2, 4)):
        with pytest.raises(RuntimeError, match="size|shape|expand|broadcast"):
            dst.copy_(bad)


def test_error_mode_raises_and_default_is_silent(mode):
    a = torch.rand(4, device="musa")
    torch.musa.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match="called a synchronizing MUSA operation"):
        a.sum().item()
    with pytest.raises(RuntimeError, match="called a synchronizing MUSA operation"):
        torch.nonzero(a)
    torch.musa.set_sync_debug_mode("default")
    assert _sync_warnings(lambda: a.sum().item()) == []
