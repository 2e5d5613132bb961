"""A tiny GPT-2-shaped language model, built from a config dict as Hugging Face
models are: what nanoGPT, minGPT and transformers' GPT2LMHeadModel train.

It has the parts whose device handling real code depends on: token and position
embeddings, pre-LayerNorm blocks, causal attention through
F.scaled_dot_product_attention (with attention dropout), tanh-GELU, residual and
embedding dropout, an output head tied to the token embedding
(``lm_head.weight = wte.weight``), and optional gradient checkpointing per block.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

CONFIG = {
    "vocab_size": 48,
    "n_positions": 16,
    "n_embd": 32,
    "n_head": 4,
    "n_layer": 2,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "resid_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "initializer_range": 0.02,
    "tie_word_embeddings": True,
}


class Block(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d = cfg["n_embd"]
        self.n_head = cfg["n_head"]
        self.attn_pdrop = cfg["attn_pdrop"]
        self.ln_1 = nn.LayerNorm(d, eps=cfg["layer_norm_epsilon"])
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=cfg["layer_norm_epsilon"])
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.resid_dropout = nn.Dropout(cfg["resid_pdrop"])

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_pdrop if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, c)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.resid_dropout(self.mlp_proj(h))


class TinyGPT(nn.Module):
    def __init__(self, cfg: dict = CONFIG):
        super().__init__()
        self.config = dict(cfg)
        d = cfg["n_embd"]
        self.wte = nn.Embedding(cfg["vocab_size"], d)
        self.wpe = nn.Embedding(cfg["n_positions"], d)
        self.drop = nn.Dropout(cfg["embd_pdrop"])
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(d, eps=cfg["layer_norm_epsilon"])
        self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)
        self.apply(self._init_weights)
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.wte.weight
        self.gradient_checkpointing = False
        self.checkpoint_kwargs: dict = {}

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config["initializer_range"])
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def gradient_checkpointing_enable(self, **checkpoint_kwargs) -> None:
        self.gradient_checkpointing = True
        self.checkpoint_kwargs = {"use_reentrant": True, **checkpoint_kwargs}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, **self.checkpoint_kwargs)
            else:
                x = block(x)
        return self.lm_head(self.ln_f(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
