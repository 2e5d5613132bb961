"""Train a tiny Transformer language model on synthetic tokens (CUDA style).

    python train_lm.py --steps 20 --gpu 0 [--amp]
"""
import argparse
import math
import os

import torch
import torch.nn as nn


class TinyLM(nn.Module):
    def __init__(self, vocab=128, d_model=64, nhead=4, layers=2, seq=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=128, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, vocab)
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, tokens):
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.pos[:, : tokens.size(1)]
        return self.head(self.encoder(x, mask=self.mask[: tokens.size(1), : tokens.size(1)]))


def get_batch(step, batch, seq, vocab, seed):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    data = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return data[:, :-1], data[:, 1:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--amp", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("CUDA_LAUNCH_BLOCKING", "0")
    device = torch.device(f"cuda:{args.gpu}" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print(f"device: {device}")
    if device.type == "cuda":
        torch.cuda.set_device(args.gpu)

    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    amp_dtype = torch.bfloat16
    for step in range(args.steps):
        x, y = get_batch(step, args.batch, 32, 128, args.seed)
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=amp_dtype, enabled=args.amp):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}")
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        print(f"memory allocated: {torch.cuda.memory_allocated(device) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
