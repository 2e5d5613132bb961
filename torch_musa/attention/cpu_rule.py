"""PyTorch's own SDPA rule for the CPU device, asked about musa inputs.

The host driver runs the CPU's kernels, so where musa decides on a fused
attention kernel it must refuse exactly what the CPU device refuses before
choosing one (``sdp_utils_cpp``'s ``use_flash_attention_cpp``: flash enabled,
not nested, no dropout, 4-D inputs, equal batch sizes, key/value heads equal to
the query's or dividing them under ``enable_gqa``, a 2-D or 4-D mask that
broadcasts, equal head dims, non-empty sequences, last-dim stride 1, a mask that
does not require grad, and the dtype). Rather than re-implement that list,
these helpers ask ``aten::_fused_sdp_choice`` of CPU stand-ins of the inputs:

* a real musa tensor stands in by its zero-copy CPU alias
  (``torch_musa._C._kernel_alias``: same bytes, sizes, strides, dtype; under the
  cuda driver, whose alias is a CUDA tensor, as anything else below);
* anything else (fake/functional tensors while ``torch.compile`` traces,
  subclasses) by an uninitialised CPU tensor of the same sizes, strides and dtype
  (symbolic sizes by their hints), built with the tracing modes set aside so that
  the question leaves no node in a graph;
* a mask that requires grad by a fresh such tensor that requires grad too (the
  CPU rule refuses a fused kernel for it; an alias may be a pooled TensorImpl
  of the fallback's and is never marked).

query/key/value's ``requires_grad`` is not carried over: the CPU rule of PyTorch
2.13 reads it only for nested tensors, which never reach it from here (pinned by
tests/attention/test_sdpa_broadcast.py). The question costs about 10 us (the
alias 0.3 us each, the rule 0.8 us, the rest Python).

The rule is the CPU's for the CPU: it reads the global
``torch.backends.cuda.*_sdp_enabled`` switches and ignores the priority order
(the CPU device's ``select_sdp_backend_cpp`` does). A CPU rule that raises (a 1-D
mask makes it index out of range) counts as a refusal here: musa then takes the
math path, which accepts such a mask.
"""
from __future__ import annotations

import re
import warnings

import torch
from torch.nn.attention import SDPBackend

__all__ = ["cpu_choice", "cpu_flash_accepts", "cpu_flash_refusals", "stand_ins"]

_FLASH = int(SDPBackend.FLASH_ATTENTION)
_MATH = int(SDPBackend.MATH)


def _hint(n) -> int:
    """A size or stride as a number: a symbolic one's value in this trace."""
    if isinstance(n, torch.SymInt):
        hint = n.node.hint
        return int(hint) if hint is not None else 1
    return int(n)


def layout_stand_in(t, device, requires_grad: bool = False):
    """An uninitialised tensor on ``device`` with ``t``'s sizes, strides (symbolic ones by
    their hints) and dtype, for asking a device's rule about ``t`` (values never read)."""
    size, stride = [_hint(n) for n in t.size()], [_hint(n) for n in t.stride()]
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=device)
    return out.requires_grad_() if requires_grad else out


_kernel_alias = None  # torch_musa._C._kernel_alias, bound on first use (import order)
_ALIAS_IS_CPU = None  # whether that alias is a CPU tensor (host driver; cuda's is a CUDA one)


def _stand_in(t, requires_grad: bool):
    global _kernel_alias, _ALIAS_IS_CPU
    if t is None:
        return None
    if requires_grad and t.requires_grad and t.is_floating_point():
        # A fresh leaf: an alias may be a pooled TensorImpl of the fallback's (one made
        # under inference mode stays an inference tensor), never to be marked.
        return layout_stand_in(t, "cpu", requires_grad=True)
    if type(t) is torch.Tensor and t.is_cpu:
        return t.detach()
    if _ALIAS_IS_CPU is None:
        from torch_musa import _C
        from torch_musa._driver import KERNEL_DEVICE

        _kernel_alias, _ALIAS_IS_CPU = _C._kernel_alias, KERNEL_DEVICE == "cpu"
    if (_ALIAS_IS_CPU and type(t) is torch.Tensor and t.device.type == "musa"
            and not torch._C._len_torch_dispatch_stack()):
        return _kernel_alias(t)
    return layout_stand_in(t, "cpu")


def stand_ins(*tensors, mask_grad: bool = True):
    """CPU tensors with the sizes, strides and dtypes of ``tensors`` (query, key, value,
    mask); the mask's ``requires_grad`` too, unless ``mask_grad=False``."""
    *qkv, mask = tensors
    return (*(_stand_in(t, False) for t in qkv), _stand_in(mask, mask_grad))


def _ask(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, mask_grad=True) -> int:
    if any(t.is_nested for t in (query, key, value)):
        return _MATH  # check_nested_tensor: the CPU's flash kernel takes no nested tensors
    outer_modes = torch._C._len_torch_dispatch_stack() > 0
    if outer_modes:
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            return _ask(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                        mask_grad)
    q, k, v, m = stand_ins(query, key, value, attn_mask, mask_grad=mask_grad)
    try:
        return _choice(q, k, v, m, dropout_p, is_causal, scale, enable_gqa)
    except (RuntimeError, IndexError):
        return -1


def _choice(q, k, v, m, dropout_p, is_causal, scale, enable_gqa) -> int:
    # torch._fused_sdp_choice rather than torch.ops.aten's: 0.8 us instead of 2.3, and its
    # binding hands the rule's debug warnings to Python on return (through torch.ops they
    # waited for the outermost call to return, past any catch_warnings of ours).
    if torch._C._is_torch_function_mode_enabled():
        with torch._C.DisableTorchFunction():
            return int(torch._fused_sdp_choice(q, k, v, m, dropout_p, is_causal, scale=scale,
                                               enable_gqa=enable_gqa))
    return int(torch._fused_sdp_choice(q, k, v, m, dropout_p, is_causal, scale=scale,
                                       enable_gqa=enable_gqa))


def cpu_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False) -> int:
    """What the CPU device's ``_fused_sdp_choice`` answers for inputs of these sizes,
    strides, dtypes and ``requires_grad``, under the current switches (``SDPBackend``
    as an int; -1 where the CPU rule raises)."""
    return _ask(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def cpu_flash_accepts(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                      scale=None, enable_gqa=False, *, mask_grad: bool = True) -> bool:
    """Whether the CPU's constraints for its flash kernel (``use_flash_attention_cpp``)
    accept these inputs, whatever the backend switches say."""
    flash, math = torch._C._get_flash_sdp_enabled(), torch._C._get_math_sdp_enabled()
    if flash and math:
        return _ask(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                    mask_grad) == _FLASH
    # Flash must be on for the CPU to consider it, and math on so that a refusal is an
    # answer rather than an error. The switches are global: restored at once.
    try:
        torch._C._set_sdp_use_flash(True)
        torch._C._set_sdp_use_math(True)
        return _ask(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                    mask_grad) == _FLASH
    finally:
        torch._C._set_sdp_use_flash(flash)
        torch._C._set_sdp_use_math(math)


_TRIGGERED = re.compile(r"\s*\(Triggered internally at .*\)\s*$", re.S)


def cpu_flash_refusals(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                       scale=None, enable_gqa=False, *, mask_grad: bool = True) -> list[str]:
    """The CPU rule's own reasons for refusing its flash kernel ([] when it accepts), as
    its debug warnings give them; for error messages (slower than
    :func:`cpu_flash_accepts`)."""
    if cpu_flash_accepts(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                         mask_grad=mask_grad):
        return []
    if any(t.is_nested for t in (query, key, value)):
        return ["nested tensors are not supported by the CPU's flash kernel"]
    flash, math = torch._C._get_flash_sdp_enabled(), torch._C._get_math_sdp_enabled()
    reasons = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # Flash alone: the CPU rule then explains each refusal in a warning.
            torch._C._set_sdp_use_flash(True)
            torch._C._set_sdp_use_math(False)
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                q, k, v, m = stand_ins(query, key, value, attn_mask, mask_grad=mask_grad)
                _choice(q, k, v, m, dropout_p, is_causal, scale, enable_gqa)
        except (RuntimeError, IndexError) as e:
            if "No available kernel" not in str(e):
                reasons.append(str(e).splitlines()[0])
        finally:
            torch._C._set_sdp_use_flash(flash)
            torch._C._set_sdp_use_math(math)
    for w in caught:
        text = _TRIGGERED.sub("", str(w.message)).strip()
        if text and not text.startswith("Flash attention kernel not used because"):
            reasons.append(text)
    return reasons or ["(the rule gave no reason)"]
