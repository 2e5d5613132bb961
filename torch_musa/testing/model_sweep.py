"""Run Hugging Face models built from tiny configs on musa against the CPU.

OpInfo and module_db test one op or one layer at a time; a whole model is where
the rest shows: the ops a layer's fast paths and helpers reach (weight norm in
wav2vec2's positional convolution, MoE routing's index ops, relative-position
gathers), the order autograd runs them in, views of views of one storage. Each
model is built on the CPU from a tiny config with a fixed seed and moved with
``.to("musa")``, as users move theirs; a forward in training mode and the
backward of a sum of squares then run on both devices, and the outputs and every
parameter's gradient are compared; decoders and encoder-decoders also generate eight
greedy tokens (eval mode, KV cache) on both; ``--compile`` runs the training step under
``torch.compile`` on both devices instead. Nothing is downloaded.

Under the host driver musa runs the CPU's kernels, so a model passes only bit for
bit; under another driver, or compiled (Inductor generates each device's kernels), within
CLOSE, with the bit-identity reported beside. Where a tensor is past CLOSE, the same
step in float64 on the CPU decides: some gradients are sums that cancel, and there the
CPU's own float32 answer is off by more than CLOSE allows (YOLOS's position embeddings:
7e-4 from float64 where the gradient is 2e-5), so musa's may be at most ERROR_FACTOR
times further from float64 than the CPU's is. Both devices compute in full float32 during
the sweep (TF32 off). A model
also reports the ops that took the boxed fallback while it ran on musa, which is
how the registry's gaps surface (``TORCH_MUSA_FALLBACK`` warnings are muted here).

    python -m torch_musa.testing.model_sweep [--models bert,llama,...] [--compile] [--json out.json] [--md out.md]

Needs ``transformers`` (a test dependency of torch_musa).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import signal
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from torch_musa._driver import KERNEL_DEVICE
from torch_musa._table import render

from .sweep_common import ERROR_FACTOR, distances_from_reference, name_list, progress_bar, rate, why

SEED = 0
#: The small sizes every config takes where it has the field (names differ by family).
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=99,
            max_position_embeddings=64, num_key_value_heads=1, head_dim=16, n_embd=32, n_layer=2, n_head=2,
            n_positions=64, d_model=32, num_layers=2, num_heads=2, d_ff=64, d_kv=16, ffn_dim=64, n_inner=64)
#: Dropout off, so that both devices compute the same function (their generators differ
#: under a GPU driver).
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attention_dropout=0.0,
                  hidden_dropout=0.0, dropout=0.0, embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0,
                  activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, classifier_dropout=0.0,
                  classifier_dropout_prob=0.0, dropout_rate=0.0, drop_path_rate=0.0)
#: The float32 closeness a model's outputs and gradients keep where musa's kernels are not
#: the CPU's (another driver, or compiled).
CLOSE = dict(rtol=1e-3, atol=1e-4)
AUDIO = dict(conv_dim=[8, 8], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=8,
             num_conv_pos_embedding_groups=2, mask_time_prob=0.0)


def tiny_config(name: str, **overrides):
    """``transformers.<name>`` with TINY and NO_DROPOUT applied where it has the field, then
    ``overrides``. Fields set after construction do not re-derive the fields computed from
    them, so the audio configs (whose layer count follows ``conv_dim``) are built by keyword."""
    import transformers

    cls = getattr(transformers, name)
    if "conv_dim" in overrides:
        return cls(**{k: v for k, v in {**TINY, **NO_DROPOUT}.items() if k in cls().to_dict()}, **overrides)
    cfg = cls()
    for k, v in {**TINY, **NO_DROPOUT, **overrides}.items():
        if hasattr(cfg, k):
            if isinstance(v, float) and type(getattr(cfg, k)) is int:  # LeViT's int drop_path_rate
                v = int(v)
            try:
                setattr(cfg, k, v)
            except (AttributeError, ValueError, NotImplementedError):  # derived or fixed fields
                pass
    return cfg


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def text(batch: int = 2, seq: int = 12) -> dict:
    """Token ids and a mask with padding on the second row."""
    ids = torch.randint(3, TINY["vocab_size"], (batch, seq), generator=_generator(1))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, -3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def seq2seq() -> dict:
    return {**text(seq=10), "decoder_input_ids": torch.randint(3, TINY["vocab_size"], (2, 7), generator=_generator(2))}


def ids_only() -> dict:
    return {"input_ids": text()["input_ids"]}


def image(size: int = 32) -> dict:
    return {"pixel_values": torch.randn(2, 3, size, size, generator=_generator(1))}


def audio() -> dict:
    return {"input_values": torch.randn(2, 1600, generator=_generator(1))}


def mel() -> dict:
    g = _generator(1)
    return {"input_features": torch.randn(2, 16, 60, generator=g),
            "decoder_input_ids": torch.randint(3, TINY["vocab_size"], (2, 5), generator=g)}


@dataclass
class Model:
    name: str
    cls: str  # the transformers class
    config: Callable  # () -> config
    inputs: Callable  # () -> dict of CPU tensors
    generates: bool = False  # also compare greedy generation (KV cache, eval, no grad)


def _clip_config():
    import transformers

    return transformers.CLIPConfig(
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         vocab_size=TINY["vocab_size"], max_position_embeddings=32),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=16)


MODELS = [
    # encoders
    Model("bert", "BertForMaskedLM", lambda: tiny_config("BertConfig"), text),
    Model("roberta", "RobertaForMaskedLM", lambda: tiny_config("RobertaConfig", pad_token_id=1), text),
    Model("distilbert", "DistilBertForMaskedLM",
          lambda: tiny_config("DistilBertConfig", dim=32, n_layers=2, n_heads=2, hidden_dim=64), text),
    Model("electra", "ElectraForPreTraining", lambda: tiny_config("ElectraConfig", embedding_size=32), text),
    Model("albert", "AlbertForMaskedLM", lambda: tiny_config("AlbertConfig", embedding_size=16), text),
    Model("deberta_v2", "DebertaV2ForMaskedLM",
          lambda: tiny_config("DebertaV2Config", relative_attention=True, position_buckets=8,
                              pos_att_type=["p2c", "c2p"]), text),
    Model("xlnet", "XLNetLMHeadModel", lambda: tiny_config("XLNetConfig", d_inner=64, d_head=16), text),
    Model("funnel", "FunnelForMaskedLM",
          lambda: tiny_config("FunnelConfig", block_sizes=[1, 1], d_head=16, d_inner=64, n_head=2), text),
    Model("convbert", "ConvBertForMaskedLM", lambda: tiny_config("ConvBertConfig", embedding_size=32), text),
    Model("longformer", "LongformerForMaskedLM",
          lambda: tiny_config("LongformerConfig", attention_window=[4, 4], pad_token_id=1), lambda: text(seq=16)),
    Model("big_bird", "BigBirdForMaskedLM", lambda: tiny_config("BigBirdConfig", attention_type="original_full"),
          text),
    # decoders
    Model("gpt_neox", "GPTNeoXForCausalLM", lambda: tiny_config("GPTNeoXConfig"), text, generates=True),
    Model("falcon", "FalconForCausalLM", lambda: tiny_config("FalconConfig"), text, generates=True),
    Model("phi", "PhiForCausalLM", lambda: tiny_config("PhiConfig"), text, generates=True),
    Model("gemma2", "Gemma2ForCausalLM", lambda: tiny_config("Gemma2Config", sliding_window=8), text, generates=True),
    Model("qwen3", "Qwen3ForCausalLM", lambda: tiny_config("Qwen3Config"), text, generates=True),
    Model("llama", "LlamaForCausalLM", lambda: tiny_config("LlamaConfig"), text, generates=True),
    Model("mistral", "MistralForCausalLM", lambda: tiny_config("MistralConfig", sliding_window=6), text,
          generates=True),
    Model("mixtral", "MixtralForCausalLM",
          lambda: tiny_config("MixtralConfig", num_local_experts=4, num_experts_per_tok=2), text, generates=True),
    Model("qwen2_moe", "Qwen2MoeForCausalLM",
          lambda: tiny_config("Qwen2MoeConfig", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                              shared_expert_intermediate_size=32), text, generates=True),
    Model("opt", "OPTForCausalLM", lambda: tiny_config("OPTConfig", word_embed_proj_dim=32), text, generates=True),
    Model("bloom", "BloomForCausalLM", lambda: tiny_config("BloomConfig"), text, generates=True),
    Model("gptj", "GPTJForCausalLM", lambda: tiny_config("GPTJConfig", rotary_dim=8), text, generates=True),
    Model("mamba", "MambaForCausalLM", lambda: tiny_config("MambaConfig", state_size=8), ids_only, generates=True),
    # encoder-decoders
    Model("t5", "T5ForConditionalGeneration",
          lambda: tiny_config("T5Config", num_decoder_layers=2, relative_attention_num_buckets=8), seq2seq,
          generates=True),
    Model("bart", "BartForConditionalGeneration",
          lambda: tiny_config("BartConfig", encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                              decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64), seq2seq,
          generates=True),
    # vision
    Model("vit", "ViTForImageClassification", lambda: tiny_config("ViTConfig", image_size=32, patch_size=8), image),
    Model("swin", "SwinForImageClassification",
          lambda: tiny_config("SwinConfig", image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                              num_heads=[1, 2], window_size=4), image),
    Model("convnext", "ConvNextForImageClassification",
          lambda: tiny_config("ConvNextConfig", hidden_sizes=[8, 16], depths=[1, 1], num_stages=2), image),
    Model("segformer", "SegformerForSemanticSegmentation",
          lambda: tiny_config("SegformerConfig", hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2,
                              sr_ratios=[2, 1], num_attention_heads=[1, 2], decoder_hidden_size=16, strides=[4, 2],
                              patch_sizes=[7, 3], mlp_ratios=[2, 2]), image),
    Model("dinov2", "Dinov2Model", lambda: tiny_config("Dinov2Config", image_size=32, patch_size=8), image),
    Model("mobilevit", "MobileViTForImageClassification",
          lambda: tiny_config("MobileViTConfig", image_size=32, hidden_sizes=[16, 16, 16],
                              neck_hidden_sizes=[8, 8, 16, 16, 16, 32, 64]), image),
    Model("beit", "BeitForImageClassification",
          lambda: tiny_config("BeitConfig", image_size=32, patch_size=8, use_relative_position_bias=True), image),
    Model("resnet", "ResNetForImageClassification",
          lambda: tiny_config("ResNetConfig", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]), image),
    Model("regnet", "RegNetForImageClassification",
          lambda: tiny_config("RegNetConfig", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                              groups_width=4), image),
    Model("levit", "LevitForImageClassification",
          lambda: tiny_config("LevitConfig", image_size=32, hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3],
                              depths=[1, 1, 1], key_dim=[8, 8, 8]), image),
    Model("yolos", "YolosModel",
          lambda: tiny_config("YolosConfig", image_size=[32, 32], patch_size=8, num_detection_tokens=4), image),
    # audio and multimodal
    Model("wav2vec2", "Wav2Vec2Model", lambda: tiny_config("Wav2Vec2Config", **AUDIO), audio),
    Model("wav2vec2_stable_ln", "Wav2Vec2Model",
          lambda: tiny_config("Wav2Vec2Config", **AUDIO, do_stable_layer_norm=True, feat_extract_norm="layer"), audio),
    Model("hubert", "HubertModel", lambda: tiny_config("HubertConfig", **AUDIO), audio),
    Model("whisper", "WhisperForConditionalGeneration",
          lambda: tiny_config("WhisperConfig", pad_token_id=0, bos_token_id=1, eos_token_id=2,
                              decoder_start_token_id=1, num_mel_bins=16, encoder_layers=2, decoder_layers=2,
                              encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                              decoder_ffn_dim=64, max_source_positions=30, max_target_positions=16), mel,
          generates=True),
    Model("clip", "CLIPModel", _clip_config, lambda: {**text(), **image()}),
]


@dataclass
class Result:
    model: str
    status: str  # pass | fail | error
    params: int = 0
    output_bitwise: bool = False
    grads_bitwise: bool = False
    max_output_diff: float = 0.0
    max_grad_diff: float = 0.0
    fallback_ops: dict = field(default_factory=dict)
    generation: str = "n/a"  # same | differs (greedy tokens), n/a for models that do not generate
    seconds: float = 0.0
    reason: str = ""
    float64_judged: list = field(default_factory=list)  # tensors past CLOSE that float64 let pass


def _first_tensor(out) -> torch.Tensor:
    for key in ("logits", "last_hidden_state", "prediction_logits", "logits_per_image"):
        v = getattr(out, key, None)
        if v is not None:
            return v
    return out[0]


def _build(model: Model, device: str):
    """The model from its config with the sweep's seed, built on the CPU and moved to ``device``."""
    import transformers

    torch.manual_seed(SEED)
    return getattr(transformers, model.cls)(model.config()).to(device)


def _train_step(model: Model, device: str, compiled: bool = False,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    m = _build(model, device).to(dtype).train()
    forward = m
    if compiled:
        torch._dynamo.reset()  # each device compiles its own graphs
        forward = torch.compile(m)
    torch.manual_seed(SEED + 1)  # the device's generator as the CPU's, for any randomness left
    inputs = {k: v.to(device, dtype) if v.is_floating_point() else v.to(device) for k, v in model.inputs().items()}
    y = _first_tensor(forward(**inputs)).to(dtype)
    y.square().mean().backward()
    grads = {n: p.grad.detach().cpu() for n, p in m.named_parameters() if p.grad is not None}
    return y.detach().cpu(), grads, sum(p.numel() for p in m.parameters())


def _generate(model: Model, device: str) -> torch.Tensor:
    """Eight greedy tokens from the prompt: the inference path (KV cache, eval mode, no grad)."""
    m = _build(model, device).eval()
    prompt = {k: v.to(device) for k, v in model.inputs().items() if k != "decoder_input_ids"}
    start = {}  # T5's config names no decoder start token
    if m.config.is_encoder_decoder and m.generation_config.decoder_start_token_id is None:
        start["decoder_start_token_id"] = 0
    with torch.no_grad():
        return m.generate(**prompt, max_new_tokens=8, do_sample=False, pad_token_id=0, **start).cpu()


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


@contextlib.contextmanager
def _time_limit(seconds: float):
    """A TimeoutError raised in the main thread after ``seconds`` (0, or another thread: no
    limit). Inductor once sat for minutes in sympy while compiling a model's CPU backward;
    the sweep reports that model and goes on."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"took more than {seconds:g} s (the sweep's time limit per model)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_model(model: Model, compiled: bool = False, timeout: float = 0) -> Result:
    import torch_musa.ops as musa_ops

    t0 = time.time()
    try:
        with _time_limit(timeout):
            y_cpu, g_cpu, params = _train_step(model, "cpu", compiled)
            musa_ops.reset_fallback_stats()
            y_musa, g_musa, _ = _train_step(model, "musa", compiled)
            generate = model.generates and not compiled
            tokens = {dev: _generate(model, dev) for dev in ("cpu", "musa")} if generate else None
    except Exception as e:  # noqa: BLE001 - a sweep reports every failure and goes on
        return Result(model.name, "error", reason=why(e), seconds=time.time() - t0)
    r = Result(model.name, "pass", params=params, fallback_ops=musa_ops.fallback_stats(),
               output_bitwise=torch.equal(y_cpu, y_musa), max_output_diff=_max_diff(y_cpu, y_musa),
               seconds=time.time() - t0)
    r.grads_bitwise = set(g_cpu) == set(g_musa) and all(torch.equal(g_cpu[k], g_musa[k]) for k in g_cpu)
    r.max_grad_diff = max((_max_diff(g_cpu[k], g_musa[k]) for k in g_cpu if k in g_musa), default=0.0)
    # Bit for bit where musa runs the CPU's own kernels; Inductor generates each device's
    # kernels itself, and for some models musa's round differently from the CPU's
    # (float32 last bits: deberta_v2, mixtral, mamba, resnet, wav2vec2 on 2026-12-07).
    exact = KERNEL_DEVICE == "cpu" and not compiled
    if tokens is not None:
        r.generation = "same" if torch.equal(tokens["cpu"], tokens["musa"]) else "differs"
    if set(g_cpu) != set(g_musa):
        r.status, r.reason = "fail", f"gradients for different parameters: {sorted(set(g_cpu) ^ set(g_musa))[:5]}"
    elif exact and not (r.output_bitwise and r.grads_bitwise):
        r.status, r.reason = "fail", "not bit for bit with the CPU's kernels"
    elif not exact:
        _judge_by_tolerance(model, r, {"output": (y_musa, y_cpu), **{k: (g_musa[k], g_cpu[k]) for k in g_cpu}})
    if r.status == "pass" and r.generation == "differs" and KERNEL_DEVICE == "cpu":
        r.status, r.reason = "fail", "greedy generation picked other tokens than the CPU"
    return r


def _judge_by_tolerance(model: Model, r: Result, pairs: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Each (musa, cpu) pair within CLOSE, or else no further from the float64 CPU step than
    ERROR_FACTOR times the CPU's own float32 error (the floor: float32's epsilon at the
    tensor's scale), with NaN where the CPU has it. Sets ``r``'s status, reason and float64_judged."""
    past = {}
    for name, (musa, cpu) in pairs.items():
        try:
            torch.testing.assert_close(musa, cpu, **CLOSE)
        except AssertionError as e:
            past[name] = e
    if not past:
        return
    try:
        y64, g64, _ = _train_step(model, "cpu", dtype=torch.float64)
    except Exception:  # noqa: BLE001 - no float64 path (Mixtral's grouped matmul): CLOSE's verdict
        r.status, r.reason = "fail", why(next(iter(past.values())))
        return
    exact = {"output": y64, **g64}
    for name in past:
        musa, cpu = pairs[name]
        try:
            err_cpu, err_musa, scale = distances_from_reference(cpu, musa, exact[name], name)
        except AssertionError as e:
            r.status, r.reason = "fail", why(e)
            return
        if err_musa > ERROR_FACTOR * max(err_cpu, torch.finfo(torch.float32).eps * scale):
            r.status = "fail"
            r.reason = (f"{name}: {err_musa:.1e} from the float64 step, the CPU's float32 {err_cpu:.1e} "
                        f"(at most {ERROR_FACTOR:g}x allowed); {why(past[name])}")
            return
    r.float64_judged = sorted(past)


@contextlib.contextmanager
def _full_float32():
    """TF32 off for musa's matmuls and convolutions while the sweep runs: the CPU reference
    computes in full float32, and CUDA's default (cuDNN's TF32 on) moved ConvNeXt's,
    ResNet's and SegFormer's gradients by up to 9e-5 on an H100 (2e-7 with TF32 off)."""
    matmul = torch.backends.musa.matmul
    saved = matmul.allow_tf32
    matmul.allow_tf32 = False
    try:
        with torch.backends.mudnn.flags(allow_tf32=False):
            yield
    finally:
        matmul.allow_tf32 = saved


def sweep(names: list[str] | None = None, progress: bool = False, compiled: bool = False,
          model_timeout: float = 0) -> list[Result]:
    """``compiled``: each model's training step under ``torch.compile`` (Inductor) on both
    devices, ~20 s a model on 2 cores; generation is not compared then. ``model_timeout``:
    seconds a model may take before it is reported as an error (0: no limit)."""
    picked = [m for m in MODELS if names is None or m.name in names]
    unknown = set(names or ()) - {m.name for m in MODELS}
    if unknown:
        raise ValueError(f"unknown models {sorted(unknown)}; choose from {', '.join(m.name for m in MODELS)}")
    from torch_musa.config import CONFIG
    from torch_musa.ops import registry

    results = []
    registry.set_fallback_mode("silent")
    try:
        with warnings.catch_warnings(), _full_float32(), progress_bar(picked, progress, "models") as bar:
            warnings.simplefilter("ignore")
            for model in bar:
                bar.set_postfix_str(model.name, refresh=False)
                results.append(run_model(model, compiled, model_timeout))
    finally:
        registry.set_fallback_mode(CONFIG.fallback)
    return results


def headline(results: list[Result]) -> str:
    passed = sum(r.status == "pass" for r in results)
    bitwise = sum(r.output_bitwise and r.grads_bitwise for r in results)
    fell = sorted({op for r in results for op in r.fallback_ops})
    generating = [r for r in results if r.generation != "n/a"]
    same = sum(r.generation == "same" for r in generating)
    tokens = f"; greedy generation the CPU's tokens in {same} of {len(generating)}" if generating else ""
    return (f"{len(results)} models, {rate(passed, len(results)):.2%} pass ({bitwise} bit for bit with the CPU, "
            f"outputs and gradients{tokens}); ops in the fallback: {', '.join(fell) if fell else 'none'}")


def table(results: list[Result], markdown: bool = False) -> str:
    head = ["model", "status", "params", "output", "gradients", "generation", "fallback ops", "s", "reason or note"]
    rows = [[r.model, r.status, f"{r.params:,}",
             "bit for bit" if r.output_bitwise else f"{r.max_output_diff:.1e}",
             "bit for bit" if r.grads_bitwise else f"{r.max_grad_diff:.1e}", r.generation,
             ", ".join(f"{k} ({v})" for k, v in sorted(r.fallback_ops.items())) or "-",
             f"{r.seconds:.1f}", r.reason or _float64_note(r)] for r in results]
    return render(head, rows, markdown=markdown)


def _float64_note(r: Result) -> str:
    if not r.float64_judged:
        return ""
    return f"float64 judged {len(r.float64_judged)}: " + ", ".join(r.float64_judged[:3]) + (
        ", ..." if len(r.float64_judged) > 3 else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help=f"comma-separated names (default all): {', '.join(m.name for m in MODELS)}")
    ap.add_argument("--compile", action="store_true",
                    help="the training step under torch.compile on both devices (~20 s a model on 2 cores)")
    ap.add_argument("--model-timeout", type=float, default=600,
                    help="seconds a model may take before it is reported as an error and the sweep "
                         "goes on (default 600; 0: no limit)")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--md", help="write the headline and the table as Markdown here")
    args = ap.parse_args(argv)
    t0 = time.time()
    results = sweep(name_list(args.models), progress=True, compiled=args.compile, model_timeout=args.model_timeout)
    print(table(results))
    print(headline(results))
    meta = {"command": "python -m torch_musa.testing.model_sweep " + " ".join(argv if argv is not None
                                                                              else sys.argv[1:]),
            "device": torch.musa.get_device_name(), "kernel_device": KERNEL_DEVICE, "compiled": args.compile,
            "torch": torch.__version__,
            "transformers": importlib.metadata.version("transformers"),
            "torch_musa": importlib.metadata.version("torch_musa"), "seconds": round(time.time() - t0, 1)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**meta, "headline": headline(results), "results": [asdict(r) for r in results]}, f, indent=2)
    if args.md:
        with open(args.md, "w") as f:
            title = "Hugging Face models from tiny configs" + (", compiled" if args.compile else "")
            f.write(f"# {title}: musa vs CPU\n\n`{meta['command'].strip()}` on "
                    f"{meta['device']} (kernels: {KERNEL_DEVICE}), torch {meta['torch']}, transformers "
                    f"{meta['transformers']}, {meta['seconds']:.0f} s.\n\n{headline(results)}\n\n"
                    f"{table(results, markdown=True)}\n")
    return 0 if all(r.status == "pass" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
