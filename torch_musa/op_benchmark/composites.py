"""Composite operations for suite files, named ``bench.<function>``.

A suite file is data: its ``op:`` (or ``expr:``) names a callable and nothing
in it is evaluated as Python. What used to be written as an expression
(``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w``) is a function
here (``op: bench.rms_norm``, ``args: [$x, $w, $eps]``). Add one here to
benchmark another composition.
"""
from __future__ import annotations

import torch

__all__ = ["attention", "bmm_nt", "cast", "chunk_cat_reversed", "expand_contiguous", "index",
           "matmul_nt", "permute_contiguous", "rms_norm", "rms_norm_fp32", "strided_columns",
           "topk_values", "transpose_contiguous"]


def attention(q, k, v):
    """softmax(q kᵀ / √D) v, composed of matmuls and a softmax."""
    return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1) @ v


def bmm_nt(a, b):
    """a @ bᵀ for batches: torch.bmm(a, b.transpose(1, 2))."""
    return torch.bmm(a, b.transpose(1, 2))


def matmul_nt(a, b):
    """a @ bᵀ: torch.matmul(a, b.t())."""
    return torch.matmul(a, b.t())


def index(x, *indices):
    """x[indices]: integer or boolean (mask) advanced indexing."""
    return x[indices]


def strided_columns(x, step=2):
    """x[:, ::step], made contiguous."""
    return x[:, ::step].contiguous()


def topk_values(x, k, dim=-1):
    return torch.topk(x, k, dim=dim).values


def rms_norm(x, w=None, eps=1e-6):
    """x · rsqrt(mean(x²) + eps) · w, in the input's dtype."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def rms_norm_fp32(x, w=None, eps=1e-6):
    """RMSNorm the Llama way: computed in float32, cast back, then scaled."""
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if w is None else y * w


def transpose_contiguous(x, dim0=0, dim1=1):
    return x.transpose(dim0, dim1).contiguous()


def permute_contiguous(x, dims):
    return x.permute(*dims).contiguous()


def expand_contiguous(x, *sizes):
    return x.expand(*sizes).contiguous()


def chunk_cat_reversed(x, chunks=4, dim=-1):
    """The chunks of x along dim, concatenated in reverse order."""
    return torch.cat(x.chunk(chunks, dim=dim)[::-1], dim=dim)


def cast(x, dtype):
    """x.to(dtype)."""
    return x.to(dtype)
