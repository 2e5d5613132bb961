"""A small GPT-2 (Hugging Face transformers, from a config) trained with AdamW,
written for CUDA: musa-doctor runs it unmodified through torch_musa.cuda_compat."""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=2)
p.add_argument("--embd", type=int, default=64)
p.add_argument("--seq", type=int, default=32)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
a = p.parse_args()

torch.manual_seed(0)
cfg = GPT2Config(n_layer=a.layers, n_embd=a.embd, n_head=4, n_positions=a.seq, vocab_size=512)
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(a.steps):
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.bf16):
        loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.3f}")
