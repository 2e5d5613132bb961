"""Small reference models and a training loop used to compare devices.

The same seed gives the same initial weights and the same batches on every
device, so losses and parameters can be compared step by step.
"""
from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Sequential):
    def __init__(self, d_in: int = 32, hidden: int = 64, classes: int = 10):
        super().__init__(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, classes))


class SmallCNN(nn.Module):
    """Conv, batch norm, pooling and dropout: the layers a vision model uses."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 16, classes))

    def forward(self, x):
        return self.head(self.features(x))


class SmallTransformer(nn.Module):
    """Token embedding, a two-layer transformer encoder, and a classifier."""

    def __init__(self, vocab: int = 100, d_model: int = 64, heads: int = 4, layers: int = 2,
                 classes: int = 10, seq: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=128, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens) + self.pos[: tokens.shape[1]])
        return self.head(self.norm(h).mean(dim=1))


def make_batches(kind: str, steps: int, batch: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if kind == "mlp":
            x = torch.randn(batch, 32, generator=g)
        elif kind == "cnn":
            x = torch.randn(batch, 3, 16, 16, generator=g)
        else:
            x = torch.randint(0, 100, (batch, 16), generator=g)
        yield x, torch.randint(0, 10, (batch,), generator=g)


MODELS = {"mlp": MLP, "cnn": SmallCNN, "transformer": SmallTransformer}


def train(kind: str, device: str, steps: int = 20, optimizer: str = "sgd", seed: int = 0,
          foreach: bool | None = None):
    """Train ``kind`` on ``device``; returns (losses, final parameters on CPU)."""
    torch.manual_seed(seed)
    model = MODELS[kind]().to(device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=foreach)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=foreach)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    torch.manual_seed(seed + 1)  # dropout masks: same stream on every device
    for x, y in make_batches(kind, steps, seed=seed):
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return losses, params
