"""The debugging tools on two real small models: a transformer block LM and a CNN.

1. CompareWithCPU on the transformer, with a planted bug: a musa layer-norm
   kernel that uses the unbiased variance. The first divergent op is named with
   its module path and source line; the layer norms of later layers, whose inputs
   come from it, are marked downstream.
2. CompareWithCPU on the CNN (clean): every op matches CPU.
3. NanInfTracker on the transformer (clean): the causal mask's -inf is an
   explicit fill, not a report.
4. NanInfTracker on a CNN whose submodule takes log of negative numbers: the NaN
   is traced to that log and module, not to the ops that carried it.

    python examples/debug_tools.py [--device musa] [--out debug_tools_out] [--no-plant]
"""
from __future__ import annotations

import argparse
import math
import os
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_musa  # noqa: F401  (registers the musa device)
from torch_musa.utils.compare_tool import CompareWithCPU, NanInfTracker, open_module_tracker


# ----------------------------------------------------------------------------- models
class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q = self.q_proj(x).view(b, t, h, d // h).transpose(1, 2)
        k = self.k_proj(x).view(b, t, h, d // h).transpose(1, 2)
        v = self.v_proj(x).view(b, t, h, d // h).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // h)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.out_proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=100, d=64, heads=4, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Block(d, heads) for _ in range(n_layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class LogCompress(nn.Module):
    """Dynamic-range compression written with a bug: nothing keeps x positive."""

    def forward(self, x):
        return torch.log(x + 1e-3)


class CNN(nn.Module):
    def __init__(self, classes=10, log_compress=False, width=16, side=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), LogCompress() if log_compress else nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(2 * width * (side // 2) ** 2, classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def lm_step(model, opt, tokens):
    opt.zero_grad()
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    return loss


def cnn_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def make_lm(device, **kw):
    torch.manual_seed(0)
    model = TinyLM(**kw).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    tokens = torch.randint(0, model.embed.num_embeddings, (4, 17), device=device)
    return model, opt, tokens


def make_cnn(device, log_compress=False, batch=8):
    torch.manual_seed(0)
    model = CNN(log_compress=log_compress).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(batch, 3, 16, 16, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    return model, opt, x, y


# ----------------------------------------------------------------------------- planted bug
def plant_unbiased_layer_norm():
    """A wrong musa kernel for aten::native_layer_norm: unbiased variance (N-1)."""
    def native_layer_norm(x, normalized_shape, weight, bias, eps):
        xc = x.cpu()
        dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
        mean = xc.mean(dims, keepdim=True)
        rstd = torch.rsqrt(xc.var(dims, unbiased=True, keepdim=True) + eps)   # the bug
        out = (xc - mean) * rstd
        if weight is not None:
            out = out * weight.cpu()
        if bias is not None:
            out = out + bias.cpu()
        return out.to(x.device), mean.to(x.device), rstd.to(x.device)

    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl("native_layer_norm", native_layer_norm, "PrivateUse1")
    return lib


def banner(text):
    print("\n" + "=" * 100 + f"\n{text}\n" + "=" * 100, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="musa")
    ap.add_argument("--out", default="debug_tools_out")
    ap.add_argument("--no-plant", action="store_true", help="skip the planted layer-norm bug")
    args = ap.parse_args(argv)
    dev = args.device

    banner("1. CompareWithCPU: transformer LM, planted wrong layer-norm kernel on musa")
    model, opt, tokens = make_lm(dev)
    tracker = open_module_tracker(model)
    lib = None if args.no_plant or dev != "musa" else plant_unbiased_layer_norm()
    try:
        with CompareWithCPU(output_dir=os.path.join(args.out, "lm"), verbose=False,
                            max_printed=2) as cmp:
            for _ in range(2):
                lm_step(model, opt, tokens)
                cmp.step()
    finally:
        if lib is not None:
            lib._destroy()
        tracker.remove()

    banner("2. CompareWithCPU: CNN (clean), steps 1..2 only")
    model, opt, x, y = make_cnn(dev)
    tracker = open_module_tracker(model)
    with CompareWithCPU(start_step=1, end_step=3, output_dir=os.path.join(args.out, "cnn")) as cmp:
        for _ in range(3):
            cnn_step(model, opt, x, y)
            cmp.step()
    tracker.remove()

    banner("3. NanInfTracker: transformer LM (clean; the causal mask's -inf is explicit)")
    model, opt, tokens = make_lm(dev)
    tracker = open_module_tracker(model)
    with NanInfTracker(output_dir=os.path.join(args.out, "lm")) as nan:
        for _ in range(3):
            loss = lm_step(model, opt, tokens)
            nan.step()
    print(f"loss after 3 steps: {loss.item():.4f}")
    tracker.remove()

    banner("4. NanInfTracker: CNN with a log of negative numbers in model.features.4")
    model, opt, x, y = make_cnn(dev, log_compress=True)
    tracker = open_module_tracker(model)
    with NanInfTracker(output_dir=os.path.join(args.out, "cnn")) as nan:
        for _ in range(2):
            cnn_step(model, opt, x, y)
            nan.step()
    tracker.remove()
    print(f"\nlogs, JSON lines and the max-error plot are under {args.out}/")


if __name__ == "__main__":
    main()
