"""torch.profiler with ProfilerActivity.MUSA (PrivateUse1): musa kernels show with
device time under the ops that launched them, in key_averages() and in the chrome
trace, as CUDA kernels do with ProfilerActivity.CUDA."""
import json
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from torch_musa.config import CONFIG
from torch_musa.testing.reference import kernel_device

DEVICE_TYPE = torch.autograd.DeviceType.PrivateUse1


def _matmul_relu(n=256, steps=3):
    a = torch.randn(n, n, device="musa")
    b = torch.randn(n, n, device="musa")
    torch.musa.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            c = torch.relu(a @ b)
        torch.musa.synchronize()
        wall_us = (time.perf_counter() - t0) * 1e6
    # The same kernels on the kernel device (cuBLAS under the cuda driver rounds otherwise
    # than the CPU: 2.4e-5 apart on the H200).
    kd = kernel_device()
    ref = torch.relu(a.to(kd) @ b.to(kd)).cpu()
    torch.testing.assert_close(c.cpu(), ref)
    return prof, wall_us


def test_musa_activity_is_the_privateuse1_one():
    assert ProfilerActivity.MUSA == ProfilerActivity.PrivateUse1
    assert ProfilerActivity.MUSA in torch.profiler.supported_activities()


HOST = CONFIG.driver == "host"
# torch types every device activity PrivateUse1 once a PrivateUse1 backend is named,
# CUPTI's too (the cuda driver's kernels)
DEVICE_KINDS = (DEVICE_TYPE, torch.autograd.DeviceType.CUDA)


def test_ops_report_device_time():
    prof, wall_us = _matmul_relu()
    rows = {e.key: e for e in prof.key_averages()}
    for op in ("aten::mm", "aten::relu"):
        assert op in rows, sorted(rows)
        assert rows[op].device_time_total > 0, (op, rows[op].device_time_total)
        assert rows[op].count == 3
    kernels = [e for e in prof.events() if e.device_type in DEVICE_KINDS]
    ours = [k for k in kernels if k.name.startswith("musa_kernel:")]
    mm_ops = [e for e in prof.events() if e.name == "aten::mm" and e.device_type not in DEVICE_KINDS]
    if not HOST:
        # The GPU's kernels, from Kineto's CUPTI profiler; no launch spans of ours beside
        # them (each op's device time counted once: fused AdamW read 5.0 ms for 2.0 ms).
        assert not ours, sorted({k.name for k in ours})
        assert sum(len(op.kernels) for op in mm_ops) >= 3  # a GPU kernel for each call
        return
    # The kernels themselves: device events of the musa device, one per op call.
    assert sum(k.name == "musa_kernel:aten::mm" for k in kernels) == 3
    assert all(k.device_index == 0 for k in kernels)
    # Each kernel lies inside the CPU op that launched it.
    for op in mm_ops:
        assert len(op.kernels) == 1
    # Under the host driver kernels run inline: their time is part of the wall
    # time and the bulk of the ops' CPU time.
    device_total = sum(k.time_range.elapsed_us() for k in kernels)
    assert 0 < device_total <= wall_us * 1.05
    assert rows["aten::mm"].device_time_total >= 0.5 * rows["aten::mm"].cpu_time_total
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=10)
    assert "Self MUSA" in table or "Self PRIVATEUSE1" in table.upper(), table


def test_chrome_trace_has_kernels_streams_and_device_properties(tmp_path):
    prof, _ = _matmul_relu(steps=1)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    # Linked to the CPU op that launched it (its "External id"), as CUDA kernels are.
    ops = {e["args"]["External id"]: e["name"] for e in trace["traceEvents"]
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    if HOST:
        assert {"musa_kernel:aten::mm", "musa_kernel:aten::relu"} <= {k["name"] for k in kernels}
        stream = torch.musa.current_stream().stream_id
        assert all(k["args"]["stream"] == stream and k["args"]["device"] == 0 for k in kernels)
        assert all(ops[k["args"]["External id"]] == k["name"].split(":", 1)[1] for k in kernels)
        # Each stream the kernels ran on has its row, as CUDA traces name "stream 7".
        rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
                if e.get("ph") == "M" and e.get("name") == "thread_name"}
        assert rows[(0, stream)] == f"musa stream {stream}"
    else:  # CUPTI's kernels of the GPU, each linked to the op that launched it
        assert kernels and not [k for k in kernels if k["name"].startswith("musa_kernel:")]
        linked = {ops.get(k["args"].get("External id")) for k in kernels}
        assert "aten::mm" in linked and None not in linked, linked
        assert linked <= {"aten::mm", "aten::relu", "aten::clamp_min"}, linked  # relu's kernel
    props = [p for p in trace["deviceProperties"] if p.get("backend") == "musa"]  # and CUDA's
    assert len(props) == torch.musa.device_count()
    assert props[0]["name"] == torch.musa.get_device_name(0)
    assert props[0]["totalGlobalMem"] == torch.musa.get_device_properties(0).total_memory


def test_cpu_only_profile_is_unaffected():
    a = torch.randn(64, 64, device="musa")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.relu(a @ a)
    assert "aten::mm" in {e.key for e in prof.key_averages()}
    assert not [e for e in prof.events() if e.device_type == DEVICE_TYPE]
    assert all(e.device_time_total == 0 for e in prof.key_averages())


def test_profile_on_a_side_stream_and_second_device():
    if torch.musa.device_count() < 2:
        pytest.skip("needs 2 devices")
    s = torch.musa.Stream(device=1)
    x = torch.randn(32, 32, device="musa:1")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        with torch.musa.stream(s):
            x.relu()
        s.synchronize()
    kernels = [e for e in prof.events()
               if e.device_type == DEVICE_TYPE and e.name == "musa_kernel:aten::relu"]
    assert len(kernels) == 1 and kernels[0].device_index == 1


def test_op_served_by_the_cpu_op_of_the_same_name_keeps_its_kernel():
    # musa's aten::sum runs the CPU's aten::sum inside; torch folds the two into one
    # event, which must keep the kernel.
    b = torch.randn(64, 64, device="musa")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        b.sum()
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::sum"].device_time_total > 0
    if HOST:
        assert rows["aten::sum"].device_time_total == rows["musa_kernel:aten::sum"].device_time_total
    else:  # the GPU's reduction kernel, once
        assert "musa_kernel:aten::sum" not in rows


def test_copies_are_memcpy_events(tmp_path):
    a = torch.randn(128, 128)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        b = a.to("musa")
        b.cpu()
        b.clone()
    rows = {e.key: e for e in prof.key_averages()}
    # CUPTI adds the memory kinds: "Memcpy HtoD (Pageable -> Device)"
    copies = {kind: sum(r.count for k, r in rows.items() if k.startswith(f"Memcpy {kind}"))
              for kind in ("HtoD", "DtoH")}
    assert copies == {"HtoD": 1, "DtoH": 1}, sorted(rows)
    assert rows["aten::_copy_from"].device_time_total > 0
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    copies = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    if HOST:
        assert {c["name"] for c in copies} == {"Memcpy HtoD", "Memcpy DtoH"}
    else:  # CUPTI's, once each (the clone is a device copy there)
        assert {c["name"] for c in copies} == {"Memcpy HtoD (Pageable -> Device)",
                                               "Memcpy DtoH (Device -> Pageable)",
                                               "Memcpy DtoD (Device -> Device)"}
    assert all(c["args"]["bytes"] == 128 * 128 * 4 for c in copies)


CONVOLUTIONS = ("aten::convolution_overrideable", "aten::convolution_backward_overrideable")


def test_convolution_forward_and_backward_report_device_time():
    # Convolution reaches musa as the two *_overrideable ops, native kernels outside the
    # op path's KernelCall: they record their spans themselves.
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    x = torch.randn(2, 3, 16, 16)
    mconv = torch.nn.Conv2d(3, 8, 3, padding=1).to("musa")
    mconv.load_state_dict(conv.state_dict())
    mx = x.to("musa").requires_grad_()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        out = mconv(mx)
        out.square().sum().backward()
    # The reference on the CPU device: a CUDA backward in a process with a PrivateUse1
    # device trips autograd's stream assert (pytorch#161129). cuDNN convolves in TF32.
    ref_x = x.clone().requires_grad_()
    ref = torch.nn.functional.conv2d(ref_x, conv.weight, conv.bias, padding=1)
    ref.square().sum().backward()
    tol = {} if HOST else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(out.cpu(), ref, **tol)
    torch.testing.assert_close(mx.grad.cpu(), ref_x.grad, **tol)
    rows = {e.key: e for e in prof.key_averages()}
    for op in CONVOLUTIONS:
        assert rows[op].device_time_total > 0, (op, sorted(rows))
    if HOST:  # one kernel each, linked to its op and counted as its self time
        for op in CONVOLUTIONS:
            assert rows[f"musa_kernel:{op}"].count == 1
            assert rows[op].self_device_time_total == rows[f"musa_kernel:{op}"].device_time_total
        ops = [e for e in prof.events() if e.name in CONVOLUTIONS and e.device_type not in DEVICE_KINDS]
        assert len(ops) == 2 and all(len(op.kernels) == 1 for op in ops)


def test_item_is_a_device_to_host_copy():
    x = torch.arange(6.0, device="musa")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        value = x.sum().item()
    assert value == 15.0
    rows = {e.key: e for e in prof.key_averages()}
    dtoh = [r for k, r in rows.items() if k.startswith("Memcpy DtoH")]
    assert sum(r.count for r in dtoh) == 1, sorted(rows)
    if HOST:
        assert rows["aten::_local_scalar_dense"].device_time_total > 0


def test_kernel_span_from_python_counts_once_and_ends_on_error():
    # _C._KernelSpan is how kernels outside the op path (Inductor's compiled kernels,
    # Python kernels over aliases) record their spans: ops run inside it are part of
    # its kernel, and an exception still ends it (the next op records its own).
    from torch_musa import _C

    a = torch.randn(8, device="musa")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        with pytest.raises(ValueError, match="inside"):
            with _C._KernelSpan("python_kernel"):
                a.relu()
                raise ValueError("raised inside the span")
        b = a.neg()
    torch.testing.assert_close(b.cpu(), -a.cpu())
    names = [e.name for e in prof.events() if e.device_type == DEVICE_TYPE]
    if HOST:
        assert names == ["musa_kernel:python_kernel", "musa_kernel:aten::neg"], names
    else:  # CUPTI's records of the GPU's own kernels: relu's (a clamp) and neg's
        assert len(names) == 2 and "clamp" in names[0] and "neg" in names[1], names
    ops = {e.name for e in prof.events() if e.device_type not in DEVICE_KINDS}
    assert "aten::neg" in ops and "aten::relu" not in ops  # the kernel's internals, unrecorded


def test_a_kernels_own_op_calls_are_not_recorded():
    # musa's relu runs the kernel device's relu, which calls clamp_min over aliases of
    # the musa memory: the kernel's internals, kept out of the record as a GPU kernel's
    # are (as tensors of another device over musa bytes they confused the memory
    # profiler's tensor identities).
    a = torch.randn(16, device="musa")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA],
                 record_shapes=True) as prof:
        a.relu()
        a.to("cpu")
    names = [e.name for e in prof.events() if e.device_type not in DEVICE_KINDS]
    assert "aten::relu" in names and "aten::clamp_min" not in names
    # to("cpu"): the user's copy_ into the host tensor, not the kernel's own copy_ inside
    # musa's _copy_from
    assert names.count("aten::_copy_from") == 1 and names.count("aten::copy_") == 1, names


def test_kernel_span_cannot_be_entered_twice():
    from torch_musa import _C

    span = _C._KernelSpan("k")
    with span:
        with pytest.raises(RuntimeError, match="already entered"):
            span.__enter__()


def test_python_kernels_report_device_time():
    # musa's integer/float histc is a Python kernel over the tensor's bytes (host driver)
    x = torch.tensor([0.5, 1.5, 1.5, 3.5], device="musa")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        h = torch.histc(x, bins=4, min=0, max=4)
    assert h.cpu().tolist() == [1.0, 2.0, 0.0, 1.0]
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::histc"].device_time_total > 0, sorted(rows)
    if HOST:
        assert rows["musa_kernel:aten::histc"].count == 1
