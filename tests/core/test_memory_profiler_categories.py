"""torch.profiler's memory profiler (``_memory_profile()``: PARAMETER, GRADIENT, ACTIVATION,
AUTOGRAD_DETAIL, OPTIMIZER_STATE ...) categorises a musa training step's tensors as it
does the same step's on the CPU device."""
import functools

import pytest
import torch
from torch.profiler import _memory_profiler

# Under the cuda driver musa memory is CUDA's caching allocator's, whose events reach
# the profiler as cuda memory: musa's timeline there has no allocations of its own.
CUDA_ALLOCATOR_EVENTS = "musa memory is CUDA's caching allocator's under the cuda driver"

profile = functools.partial(torch.profiler.profile, record_shapes=True, profile_memory=True,
                            with_stack=True)


def _profiled_step(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    model = model.to(device)
    # foreach=False: SGD takes foreach on a PrivateUse1 device, the loop on the CPU
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    x = torch.ones((3, 2), device=device)
    with profile() as prof:
        model(x).square().sum().backward()
        opt.step()
    return model, opt, prof._memory_profile()


def _categories(memory_profile):
    """Each top-level op of the step with the categories of its tensor arguments, in
    order (tensor ids differ between devices; what each tensor is called must not)."""
    from torch._C._profiler import _EventType, _TensorMetadata
    from torch.utils._pytree import tree_flatten

    snapshot = memory_profile._category_snapshot()
    by_key: dict = {}
    for (key, _version), category in snapshot.items():
        by_key.setdefault(key, set()).add(category.name if category else "???")
    out = []
    for node in memory_profile._op_tree.dfs():
        parent = node.parent  # ops called by an aten op are its details
        if node.typed[0] != _EventType.TorchOp or (parent is not None and
                                                   parent.name.startswith("aten::")):
            continue
        args = [t for t in tree_flatten(node.typed[1].inputs)[0] if isinstance(t, _TensorMetadata)]
        keys = [_memory_profiler.TensorKey.from_tensor(t) for t in args]
        out.append((node.name, tuple(tuple(sorted(by_key.get(k, {"???"}))) for k in keys)))
    return out


def _category_of(t, memory_profile):
    """The categories of the live tensor ``t`` (the newest allocation at its address)."""
    snapshot = memory_profile._category_snapshot()
    ptr = t.untyped_storage().data_ptr()
    mine = [key for key, _v in snapshot if key.storage.ptr == ptr and key.device == t.device]
    newest = max(key.storage.allocation_id for key in mine)
    return {category for (key, _v), category in snapshot.items()
            if key in mine and key.storage.allocation_id == newest}


@pytest.mark.requires_host_driver(CUDA_ALLOCATOR_EVENTS)
def test_training_step_categories_match_the_cpu_devices():
    _, _, cpu = _profiled_step("cpu")
    model, opt, musa = _profiled_step("musa")
    expected = _categories(cpu)
    seen = {c for _, args in expected for cats in args for c in cats}
    assert {"PARAMETER", "ACTIVATION", "GRADIENT", "AUTOGRAD_DETAIL"} <= seen  # a real reference
    assert _categories(musa) == expected
    for p in model.parameters():
        assert _category_of(p, musa) == {_memory_profiler.Category.PARAMETER}
        assert _category_of(p.grad, musa) == {_memory_profiler.Category.GRADIENT}
        assert _category_of(opt.state[p]["momentum_buffer"], musa) == {
            _memory_profiler.Category.OPTIMIZER_STATE}


@pytest.mark.requires_host_driver(CUDA_ALLOCATOR_EVENTS)
def test_memory_timeline_counts_musa_bytes():
    *_, musa = _profiled_step("musa")
    on_musa = [(action, size) for _t, action, (key, _v), size in musa.timeline
               if key.device == torch.device("musa:0")]
    assert any(size > 0 for _, size in on_musa)
    assert {a.name for a, _ in on_musa} >= {"CREATE", "DESTROY"}
