"""An RNN language model trained as PyTorch's word_language_model example trains
it: Embedding, a two-layer LSTM or GRU with dropout, a decoder tied to the
embedding, truncated backpropagation through time (the hidden state detached
between chunks), clip_grad_norm_ and a hand-written SGD update on ``p.data``.

musa runs CUDA's fused LSTM/GRU cells, which add the four gate terms in another
order than the CPU's unfused cell, so the runs agree to float32 rounding (a few
ulps of the values; measured: 5e-7 on parameters of size 0.6), not bit for bit.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ._common import assert_same, assert_same_params, params_of

VOCAB, EMB, BPTT, BATCH = 40, 24, 6, 4
TOL = {"atol": 2e-6, "rtol": 1e-5}


class RNNModel(nn.Module):
    def __init__(self, rnn_type: str, layers: int = 2, dropout: float = 0.2):
        super().__init__()
        self.rnn_type = rnn_type
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(VOCAB, EMB)
        self.rnn = getattr(nn, rnn_type)(EMB, EMB, layers, dropout=dropout)
        self.decoder = nn.Linear(EMB, VOCAB)
        self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        self.layers = layers

    def forward(self, tokens, hidden):
        out, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
        return F.log_softmax(self.decoder(self.drop(out)), dim=-1), hidden

    def init_hidden(self, batch: int):
        w = next(self.parameters())
        h = w.new_zeros(self.layers, batch, EMB)
        return (h, w.new_zeros(self.layers, batch, EMB)) if self.rnn_type == "LSTM" else h


def _detach(hidden):
    return tuple(h.detach() for h in hidden) if isinstance(hidden, tuple) else hidden.detach()


def _corpus():
    """A token stream batchified as the example does: (length, batch) columns."""
    stream = torch.randint(0, VOCAB, (BATCH * (3 * BPTT + 1),),
                           generator=torch.Generator().manual_seed(1))
    return stream.view(BATCH, -1).t().contiguous()


def _train(rnn_type, device, lr=5.0, clip=0.2):
    torch.manual_seed(0)
    model = RNNModel(rnn_type).to(device)
    assert model.decoder.weight is model.encoder.weight
    data = _corpus().to(device)
    hidden = model.init_hidden(BATCH)
    torch.manual_seed(2)
    losses, norms = [], []
    model.train()
    for i in range(0, data.size(0) - 1, BPTT):
        n = min(BPTT, data.size(0) - 1 - i)
        tokens, targets = data[i:i + n], data[i + 1:i + 1 + n]
        hidden = _detach(hidden)
        model.zero_grad()
        out, hidden = model(tokens, hidden)
        loss = F.nll_loss(out.view(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        norms.append(nn.utils.clip_grad_norm_(model.parameters(), clip).item())
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        out, _ = model(data[:BPTT], model.init_hidden(BATCH))
    return losses, norms, params_of(model), out.cpu()


@pytest.mark.requires_host_driver("the LSTM/GRU dropout masks are the CPU generator's; under the "
                                  "cuda driver cuDNN, the only other reference, draws its own")
@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU"])
def test_word_language_model_trains_as_on_the_cpu(rnn_type):
    losses, norms, params, evaluated = _train(rnn_type, "musa")
    cpu_losses, cpu_norms, cpu_params, cpu_evaluated = _train(rnn_type, "cpu")
    assert_same(torch.tensor(losses), torch.tensor(cpu_losses), "losses", **TOL)
    assert_same(torch.tensor(norms), torch.tensor(cpu_norms), "clipped gradient norms", **TOL)
    assert min(norms) > 0.2, "clip_grad_norm_ never clipped: the case tests less than it says"
    assert_same_params(params, cpu_params, f"{rnn_type} language model", **TOL)
    assert_same(evaluated, cpu_evaluated, "evaluation log-probabilities", **TOL)
    assert torch.equal(params["decoder.weight"], params["encoder.weight"])
