"""The rest of torch.cuda.__all__ on torch.musa (under musa's spelling), each checked
against what torch.cuda does with it."""
import re
import threading

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa.config import CONFIG
from torch_musa.testing import api_names


def test_torch_cuda_names_count():
    assert api_names.musa_spelling("cudaStatus") == "musaStatus"
    missing = api_names.cuda_names_missing()
    assert api_names.report()["torch.cuda"] == (len(torch.cuda.__all__) - len(missing),
                                                len(torch.cuda.__all__), missing)
    print(f"torch.cuda names on torch.musa: {len(torch.cuda.__all__) - len(missing)}/"
          f"{len(torch.cuda.__all__)}; missing {missing}")
    # Only what api_names lists as out of reach, with its reason (GreenContext: SM partitions).
    assert set(missing) <= set(api_names.OUT_OF_REACH)
    assert all(len(why) > 20 for why in api_names.OUT_OF_REACH.values())


def test_get_gencode_flags_are_mcc_offload_arch_flags():
    archs = torch.musa.get_arch_list()
    assert "mp_22" in archs
    flags = torch.musa.get_gencode_flags()
    # the real torch_musa builds with one --offload-arch=mp_XY per architecture
    assert flags.split() == [f"--offload-arch={a}" for a in archs]
    assert all(re.fullmatch(r"--offload-arch=mp_\d\d", f) for f in flags.split()), flags


def test_build_facts_and_status_codes():
    assert torch.musa.has_half is True and isinstance(torch.musa.has_magma, bool)
    assert torch.musa.musaStatus.SUCCESS == 0
    # musa's runtime number for "not ready" (torch.cuda.cudaStatus keeps a legacy 34)
    assert torch.musa.musaStatus.ERROR_NOT_READY == 600  # musaErrorNotReady (cudaErrorNotReady)


def test_solver_handle_is_per_thread_and_device():
    if CONFIG.driver == "cuda" and not hasattr(torch.cuda, "current_solver_handle"):
        # torch 2.11 (the H200 run) has no torch.cuda.current_solver_handle: a clear refusal
        with pytest.raises(RuntimeError, match="does not expose its cuSOLVER handle"):
            torch.musa.current_solver_handle()
        return
    h = torch.musa.current_solver_handle()
    assert isinstance(h, int) and h == torch.musa.current_solver_handle()
    assert h != torch.musa.current_blas_handle()
    other = []
    t = threading.Thread(target=lambda: other.append(torch.musa.current_solver_handle()))
    t.start()
    t.join()
    assert other[0] != h


def test_get_stream_from_external():
    s = torch.musa.get_stream_from_external(0x5678)
    assert isinstance(s, torch.musa.Stream) and s.stream_id == 0x5678
    assert s.device_index == torch.musa.current_device() and s.device.type == "musa"
    assert torch.musa.get_stream_from_external(0x5678, device=0).device_index == 0


def test_profiler_start_stop():
    assert torch.musa.profiler.__all__ == torch.cuda.profiler.__all__
    torch.musa.profiler.start()
    torch.musa.profiler.stop()
    x = torch.ones(4, device="musa")
    with torch.musa.profiler.profile():
        y = x * 2
    assert y.sum().item() == 8.0


def test_legacy_sparse_types():
    import torch_musa.core.sparse as by_import
    assert by_import is torch.musa.sparse
    assert {n for n in dir(torch.sparse) if n.endswith("Tensor") and n[0].isupper()} - {"Tensor", "SparseSemiStructuredTensor"} \
        == {n for n in dir(torch.musa.sparse) if n.endswith("Tensor")}
    i, v = torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0])
    x = torch.musa.sparse.FloatTensor(i, v, torch.Size([4]))
    ref = torch.sparse.FloatTensor(i, v, torch.Size([4]))
    assert x.device.type == "musa" and x.layout == torch.sparse_coo
    assert torch.equal(x.to_dense().cpu(), ref.to_dense())
    assert isinstance(x, torch.musa.sparse.FloatTensor)
    assert not isinstance(x, torch.musa.sparse.DoubleTensor)
    assert not isinstance(x.to_dense(), torch.musa.sparse.FloatTensor)
    assert not isinstance(ref, torch.musa.sparse.FloatTensor)
    e = torch.musa.sparse.LongTensor(2, 3)
    assert e.shape == (2, 3) and e._nnz() == 0 and e.dtype == torch.int64 and e.device.type == "musa"
    with pytest.raises(TypeError, match="indices, values"):
        torch.musa.sparse.FloatTensor(i)
