"""A word-level LSTM language model in the style of PyTorch's word_language_model
example (embedding, 2-layer LSTM, tied decoder), trained with clipped SGD on
random tokens; written for CUDA."""
import argparse

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--vocab", type=int, default=1000)
p.add_argument("--hidden", type=int, default=64)
p.add_argument("--bptt", type=int, default=16)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--steps", type=int, default=10)
a = p.parse_args()


class LSTMLM(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden, num_layers=2, dropout=0.2)
        self.decoder = nn.Linear(hidden, vocab)
        self.decoder.weight = self.embed.weight

    def forward(self, tokens, state):
        out, state = self.rnn(self.embed(tokens), state)
        return self.decoder(out), state


torch.manual_seed(0)
device = torch.device("cuda")
model = LSTMLM(a.vocab, a.hidden).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1.0)
state = None
for step in range(a.steps):
    data = torch.randint(0, a.vocab, (a.bptt + 1, a.batch), device=device)
    logits, state = model(data[:-1], state)
    state = tuple(s.detach() for s in state)
    loss = nn.functional.cross_entropy(logits.view(-1, a.vocab), data[1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    opt.step()
    print(f"step {step} loss {loss.item():.3f}")
