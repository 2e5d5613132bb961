"""Flash attention for musa: tiled forward and backward with an online softmax.

Inputs are (batch, heads, seq, head_dim) in float16/bfloat16. Query tiles of
``BLOCK_M`` rows meet key tiles of ``BLOCK_N`` columns; each tile of scores
(BLOCK_M x BLOCK_N per head) is the largest temporary, so the L x L score
matrix is never materialised and peak memory grows linearly with the sequence
length. Accumulation is in float32 (as flash kernels do); the output is cast
back to the input dtype, and the float32 log-sum-exp of every row is kept for
the backward pass, which recomputes the scores tile by tile.

Grouped-query attention (fewer key/value heads than query heads) is handled
by viewing the query heads as (kv_heads, group) and broadcasting keys and
values over the group. Dropout masks are drawn per tile from a generator
seeded by (seed, tile), so the backward pass regenerates exactly the masks the
forward pass used. Causal masking is top-left aligned, as in PyTorch's math
path. Rows whose keys are all masked give zeros (like PyTorch's math path).
"""
from __future__ import annotations

import math

import torch

BLOCK_M = 512
BLOCK_N = 1024
TILE_BUDGET = 1 << 22  # float32 score elements in one tile, all batches and heads together


def _blocks(batch_heads: int = 1):
    """Tile sizes: BLOCK_M x BLOCK_N, halved while batch*heads tiles exceed TILE_BUDGET."""
    bm, bn = BLOCK_M, BLOCK_N
    while batch_heads * bm * bn > TILE_BUDGET and (bm > 64 or bn > 64):
        if bm >= bn and bm > 64:
            bm //= 2
        else:
            bn //= 2
    return bm, bn


def _tile_dropout_keep(seed: int, i0: int, j0: int, shape, p: float, device) -> torch.Tensor:
    g = torch.Generator(device="cpu")
    g.manual_seed((int(seed) * 1_000_003 + i0 * 8_191 + j0 * 131_071 + 7) % (2**63 - 1))
    keep = torch.rand(shape, generator=g) >= p
    return keep.to(device)


def dropout_mask(seed: int, batch: int, heads: int, lq: int, lk: int, p: float, device) -> torch.Tensor:
    """The full keep-mask (B, H, Lq, Lk) the tiled kernels use for ``seed``; for tests."""
    bm, bn = _blocks(batch * heads)
    out = torch.empty(batch, heads, lq, lk, dtype=torch.bool)
    for i0 in range(0, lq, bm):
        i1 = min(i0 + bm, lq)
        for j0 in range(0, lk, bn):
            j1 = min(j0 + bn, lk)
            out[:, :, i0:i1, j0:j1] = _tile_dropout_keep(seed, i0, j0, (batch, heads, i1 - i0, j1 - j0), p, "cpu")
    return out.to(device)


def _causal_fill(s: torch.Tensor, i0: int, j0: int) -> None:
    """Mask key j > query i (top-left aligned) inside the tile at (i0, j0)."""
    bm, bn = s.shape[-2], s.shape[-1]
    if j0 + bn - 1 <= i0:
        return
    rows = torch.arange(i0, i0 + bm, device=s.device).unsqueeze(1)
    cols = torch.arange(j0, j0 + bn, device=s.device).unsqueeze(0)
    s.masked_fill_(cols > rows, float("-inf"))


def _group_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the query-group dim (2) of (B, Hk, G, ...), a view when G == 1."""
    return t.squeeze(2) if t.shape[2] == 1 else t.sum(dim=2)


def _split_heads(q, k, v, bias):
    B, Hq, Lq, _ = q.shape
    Hk, Lk = k.shape[1], k.shape[2]
    G = Hq // Hk
    q5 = q.unflatten(1, (Hk, G))
    k5 = k.unsqueeze(2)
    v5 = v.unsqueeze(2)
    b5 = None
    if bias is not None:
        b5 = bias.expand(B, Hq, Lq, Lk).unflatten(1, (Hk, G))
    return q5, k5, v5, b5, (B, Hq, Hk, G, Lq, Lk)


def _tile_keep(seed, i0, j0, B, Hq, Hk, G, bm, bn, p, device):
    return _tile_dropout_keep(seed, i0, j0, (B, Hq, bm, bn), p, device).unflatten(1, (Hk, G))


def flash_attention_forward(q, k, v, bias=None, dropout_p=0.0, is_causal=False, scale=None, seed=0):
    """Returns (out in q.dtype, logsumexp float32 (B, Hq, Lq))."""
    q5, k5, v5, b5, (B, Hq, Hk, G, Lq, Lk) = _split_heads(q, k, v, bias)
    Dv = v.shape[-1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    bm, bn = _blocks(B * Hq)
    kt = k5.float().transpose(-1, -2)
    # [V | 1]: one matmul per tile gives P @ V and the row sums of P together.
    vext = torch.ones(B, Hk, 1, Lk, Dv + 1, dtype=torch.float32, device=q.device)
    vext[..., :Dv] = v5
    out = torch.empty(B, Hk, G, Lq, Dv, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, Hk, G, Lq, dtype=torch.float32, device=q.device)
    neg_inf = float("-inf")
    for i0 in range(0, Lq, bm):
        i1 = min(i0 + bm, Lq)
        qi = q5[..., i0:i1, :].float() * scale
        m = None
        acc = None
        kend = min(Lk, i1) if is_causal else Lk
        for j0 in range(0, kend, bn):
            # Full-width tiles even past the causal edge: the tile shape keys the dropout mask.
            j1 = min(j0 + bn, Lk)
            s = torch.matmul(qi, kt[..., j0:j1])
            if b5 is not None:
                s.add_(b5[..., i0:i1, j0:j1])
            if is_causal:
                _causal_fill(s, i0, j0)
            m_tile = s.amax(dim=-1)
            m_new = m_tile if m is None else torch.maximum(m, m_tile)
            m_safe = m_new.masked_fill(m_new == neg_inf, 0.0) if (b5 is not None or is_causal) else m_new
            s.sub_(m_safe.unsqueeze(-1)).exp_()
            if dropout_p > 0.0:
                # The row sum must see the undropped probabilities.
                rowsum = s.sum(dim=-1, keepdim=True)
                keep = _tile_keep(seed, i0, j0, B, Hq, Hk, G, i1 - i0, j1 - j0, dropout_p, q.device)
                s.mul_(keep).mul_(1.0 / (1.0 - dropout_p))
                pv = torch.matmul(s, vext[..., j0:j1, :])
                pv[..., Dv:] = rowsum
            else:
                pv = torch.matmul(s, vext[..., j0:j1, :])
            if acc is None:
                acc = pv
            else:
                alpha = (m - m_safe).exp_()
                acc.mul_(alpha.unsqueeze(-1)).add_(pv)
            m = m_new
        if acc is None:  # no keys at all
            out[..., i0:i1, :] = 0
            lse[..., i0:i1] = neg_inf
            continue
        l = acc[..., Dv]
        empty_rows = l == 0
        o = acc[..., :Dv].div_(l.masked_fill(empty_rows, 1.0).unsqueeze(-1))
        if b5 is not None:
            o.masked_fill_(empty_rows.unsqueeze(-1), 0.0)
        out[..., i0:i1, :] = o
        lse[..., i0:i1] = torch.where(empty_rows, neg_inf, m + l.log())
    return out.flatten(1, 2), lse.flatten(1, 2)


def flash_attention_backward(grad_out, q, k, v, out, lse, bias=None, dropout_p=0.0, is_causal=False,
                             scale=None, seed=0, need_bias_grad=False):
    """Returns (dq, dk, dv, dbias or None) in the input dtypes.

    Per tile: P = exp([q*scale | -lse] @ [k | 1]^T) (the log-sum-exp folded
    into the matmul), dS = P * ([dO | -delta] @ [v | 1]^T), then dV += P^T dO,
    dQ += dS K * scale, dK += dS^T (Q * scale).
    """
    q5, k5, v5, b5, (B, Hq, Hk, G, Lq, Lk) = _split_heads(q, k, v, bias)
    D, Dv = q.shape[-1], v.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    bm, bn = _blocks(B * Hq)
    dev = q.device
    lse5 = lse.unflatten(1, (Hk, G))
    qa = torch.empty(B, Hk, G, Lq, D + 1, dtype=torch.float32, device=dev)
    qa[..., :D] = q5
    qa[..., :D].mul_(scale)
    qa[..., D] = lse5.masked_fill(lse5 == float("-inf"), 0.0).neg_()
    ka = torch.ones(B, Hk, 1, Lk, D + 1, dtype=torch.float32, device=dev)
    ka[..., :D] = k5
    va = torch.ones(B, Hk, 1, Lk, Dv + 1, dtype=torch.float32, device=dev)
    va[..., :Dv] = v5
    doa = torch.empty(B, Hk, G, Lq, Dv + 1, dtype=torch.float32, device=dev)
    doa[..., :Dv] = grad_out.unflatten(1, (Hk, G))
    delta = (doa[..., :Dv] * out.unflatten(1, (Hk, G))).sum(dim=-1)
    doa[..., Dv] = delta.neg()
    qs = qa[..., :D]
    do = doa[..., :Dv]
    dq = torch.zeros(B, Hk, G, Lq, D, dtype=torch.float32, device=dev)
    dk = torch.zeros(B, Hk, Lk, D, dtype=torch.float32, device=dev)
    dv = torch.zeros(B, Hk, Lk, Dv, dtype=torch.float32, device=dev)
    dbias = None
    if need_bias_grad:
        dbias = torch.zeros(B, Hk, G, Lq, Lk, dtype=torch.float32, device=dev)
    for j0 in range(0, Lk, bn):
        j1 = min(j0 + bn, Lk)
        kaj = ka[..., j0:j1, :]
        kj = kaj[..., :D]
        vaj = va[..., j0:j1, :]
        istart = (j0 // bm) * bm if is_causal else 0
        for i0 in range(istart, Lq, bm):
            i1 = min(i0 + bm, Lq)
            p = torch.matmul(qa[..., i0:i1, :], kaj.transpose(-1, -2))
            if b5 is not None:
                p.add_(b5[..., i0:i1, j0:j1])
            if is_causal:
                _causal_fill(p, i0, j0)
            p.exp_()
            doi = do[..., i0:i1, :]
            if dropout_p > 0.0:
                keep = _tile_keep(seed, i0, j0, B, Hq, Hk, G, i1 - i0, j1 - j0, dropout_p, dev)
                kscale = keep.float().mul_(1.0 / (1.0 - dropout_p))
                dv[..., j0:j1, :] += _group_sum(torch.matmul((p * kscale).transpose(-1, -2), doi))
                dp = torch.matmul(doi, vaj[..., :Dv].transpose(-1, -2)).mul_(kscale)
                dp.sub_(delta[..., i0:i1].unsqueeze(-1))
            else:
                dv[..., j0:j1, :] += _group_sum(torch.matmul(p.transpose(-1, -2), doi))
                dp = torch.matmul(doa[..., i0:i1, :], vaj.transpose(-1, -2))
            ds = p.mul_(dp)
            if dbias is not None:
                dbias[..., i0:i1, j0:j1] = ds
            dq[..., i0:i1, :] += torch.matmul(ds, kj)
            dk[..., j0:j1, :] += _group_sum(torch.matmul(ds.transpose(-1, -2), qs[..., i0:i1, :]))
    dq = dq.mul_(scale).flatten(1, 2).to(q.dtype)
    if dbias is not None:
        dbias = dbias.flatten(1, 2).sum_to_size(bias.shape).to(bias.dtype)
    return dq, dk.to(k.dtype), dv.to(v.dtype), dbias
