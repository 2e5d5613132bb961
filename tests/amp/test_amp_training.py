"""AMP training of the small transformer with GradScaler: musa matches the CPU device.

Both devices run float16 autocast with a GradScaler for a few SGD steps
(Adam would turn float16 rounding noise in near-zero gradients, such as the
key bias's, into full-size updates). The
per-op policies differ a little (CUDA's lists on musa, PyTorch's CPU lists on
the CPU) and attention runs musa's flash kernel, so the comparison is at
float16 tolerance. Dropout is set to 0: the attention-dropout random stream of
the tiled flash kernel is its own, by design.
"""
import torch

import torch_musa.amp
import torch_musa.attention
from torch_musa.testing.models import SmallTransformer, make_batches

torch_musa.amp.register()
torch_musa.attention.register()


def _train(device, steps=4):
    torch.manual_seed(0)
    model = SmallTransformer()
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if isinstance(mod, torch.nn.MultiheadAttention):
            mod.dropout = 0.0
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**12)
    losses, dtypes = [], set()
    for x, y in make_batches("transformer", steps):
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.float16):
            logits = model(x)
            dtypes.add(logits.dtype)
            loss = torch.nn.functional.cross_entropy(logits, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}, dtypes


def test_amp_transformer_matches_cpu():
    musa_losses, musa_params, musa_dtypes = _train("musa")
    cpu_losses, cpu_params, _ = _train("cpu")
    assert musa_dtypes == {torch.float16}  # the classifier head ran in float16
    torch.testing.assert_close(torch.tensor(musa_losses), torch.tensor(cpu_losses), rtol=2e-3, atol=2e-3)
    for name in musa_params:
        torch.testing.assert_close(musa_params[name], cpu_params[name], rtol=1e-2, atol=5e-4, msg=name)
    assert all(p.isfinite().all() for p in musa_params.values())
