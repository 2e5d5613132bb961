"""transformers' ``from_pretrained`` onto musa, as a user loads a model today: with a
device map ("musa", "auto", a dict), with and without ``low_cpu_mem_usage``, from a
safetensors checkpoint, hub kernels on (transformers' default), with no download — the
loaded model computes exactly what the CPU model computes."""
import importlib.util
import sys

import pytest
import torch

import torch_musa

pytestmark = pytest.mark.slow  # imports transformers (seconds)

HAS_KERNELS = importlib.util.find_spec("kernels") is not None
needs_kernels = pytest.mark.skipif(not HAS_KERNELS, reason="the kernels package (transformers' "
                                   "hub kernels) is not installed here")


def _assert_same_logits(musa, cpu):
    """Bit for bit where the host driver runs the CPU's kernels; to float32's tolerance on a GPU."""
    if torch_musa._driver.NAME == "host":
        assert torch.equal(musa.cpu(), cpu)
    else:
        torch.testing.assert_close(musa.cpu(), cpu, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    path = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(path)
    assert (path / "model.safetensors").exists()
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(ids).logits
    return path, ids, reference


@pytest.mark.parametrize("low_cpu_mem_usage", [True, False], ids=["low_cpu_mem", "default_mem"])
@pytest.mark.parametrize("device_map", ["musa", "auto", {"": "musa:0"}], ids=["musa", "auto", "dict"])
def test_device_map_loads_onto_musa_and_matches_cpu(checkpoint, device_map, low_cpu_mem_usage):
    from transformers import AutoModelForCausalLM

    path, ids, reference = checkpoint
    model = AutoModelForCausalLM.from_pretrained(path, device_map=device_map,
                                                 low_cpu_mem_usage=low_cpu_mem_usage)
    assert model.use_kernels == HAS_KERNELS  # transformers' default: kernelized where it can
    assert {p.device for p in model.parameters()} == {torch.device("musa", 0)}
    with torch.no_grad():
        logits = model(ids.to("musa")).logits
    assert logits.device.type == "musa"
    _assert_same_logits(logits, reference)


def test_greedy_generate_after_loading_matches_cpu(checkpoint):
    from transformers import AutoModelForCausalLM

    path, ids, _ = checkpoint
    cpu = AutoModelForCausalLM.from_pretrained(path)
    musa = AutoModelForCausalLM.from_pretrained(path, device_map="auto")
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(musa.generate(ids.to("musa"), **kwargs).cpu(), cpu.generate(ids, **kwargs))


@needs_kernels
def test_kernels_still_refuses_unknown_device_types():
    import kernels  # noqa: F401

    check = sys.modules["kernels._internals.layer.kernelize"]._validate_device_type
    check("musa")
    check("cuda")
    with pytest.raises(ValueError, match="Unsupported device type 'mus'"):
        check("mus")


@needs_kernels
def test_kernels_imported_before_torch_accepts_musa(subpython):
    """The other import order: kernels loaded first, torch_musa (autoloaded by torch) after."""
    r = subpython("""
        import kernels
        import torch
        from torch_musa.integrations import hub_kernels
        print(hub_kernels.accepts_musa())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
