"""One training micro-step and one optimizer step as kernel records, for whole training runs: full fine-tuning or
LoRA, activation recomputation, the LM head over every token, AdamW or SGD with momentum; and a model's shard on one
GPU of a tensor / pipeline / context-parallel layout.

Rules (stated approximations):
- a weight GEMM (y = x W^T, cuBLAS M = out, N = tokens, K = in) has two backward GEMMs: the input gradient
  (M = in, N = tokens, K = out) and the weight gradient (M = out, N = in, K = tokens);
- LoRA (Hu et al. 2021, arXiv 2106.09685) freezes W: its weight gradient goes, and each adapted GEMM gains the
  adapters A (in -> r) and B (r -> out), forward and both backward GEMMs; `lora_targets` "all" adapts every linear
  layer but the LM head, "attention" the attention's projections only (NeMo's `target_modules: ['attention']`, as in
  MLPerf's Llama-2-70B LoRA, `mlperf-training-power/configs/.../megatron_gpt_peft_tuning_config.yaml`);
- recomputation: ``full`` runs the forward pass again in the backward pass; ``selective`` re-runs the attention core
  only (Korthikanti et al. 2022, arXiv 2205.05198, section 5);
- the loss: the LM head over every token (its vocabulary GEMM and a softmax), forward and backward;
- a tensor-parallel shard (Megatron-LM, Shoeybi et al. 2019, arXiv 1909.08053) holds heads / tp attention heads,
  a 1 / tp slice of the MLP and of the vocabulary; a pipeline stage holds layers / pp layers (the stage with the LM
  head is kept whole: the slowest stage sets the pipeline's pace); context parallelism splits each sequence's
  tokens cp ways (keys and values stay whole: ring attention passes them around).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from joulecast.data.errors import InputError, require, require_choice
from joulecast.data.models import family, hidden_size, is_mixture_of_experts
from joulecast.features.kinds.attention import BACKWARD_PASSES as ATTENTION_BACKWARD_PASSES
from joulecast.features.kinds.streaming import backward_of

RECOMPUTE = ("none", "selective", "full")
LORA_TARGETS = ("all", "attention")
OPTIMIZERS = ("adamw", "sgd")
# Fields that give a family's head count, MLP width, layers and vocabulary (HF config names).
_FIELDS = {"llama": ("num_attention_heads", "intermediate_size", "num_hidden_layers", "vocab_size"),
           "gpt2": ("n_head", "n_inner", "n_layer", "vocab_size"),
           "opt": ("num_attention_heads", "ffn_dim", "num_hidden_layers", "vocab_size")}


def _weight_gemm(r: Mapping[str, Any]) -> bool:
    """A weight GEMM: a linear layer on tensor cores (not the rotary table's fp32 GEMM, not attention's bmm)."""
    return r["kind"] == "gemm" and r["op"] == "linear" and bool(r.get("tensor_core"))


def _in_out(r: Mapping[str, Any], tokens: int) -> tuple[int, int]:
    """(out, in) features of a weight GEMM, whichever of M and N holds the tokens (GPT-2's Conv1D has M = tokens)."""
    return (r["n"], r["k"]) if r["m"] == tokens and r["n"] != tokens else (r["m"], r["k"])


def adapted(r: Mapping[str, Any], tokens: int, skip_widths: frozenset[int]) -> bool:
    """A weight GEMM that LoRA adapts: neither of its widths is one of `skip_widths` (the vocabulary: the LM head;
    the MLP's width too, for attention-only adapters)."""
    return _weight_gemm(r) and not skip_widths.intersection(_in_out(r, tokens))


def micro_step(forward: list[dict[str, Any]], tokens: int, *, lora_rank: int = 0, recompute: str = "none",
               skip_widths: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """Forward records (tokens per micro-batch) -> forward + backward records of one micro-batch (no optimizer);
    with LoRA, the GEMMs `adapted` (given `skip_widths`) get adapters and every weight stays frozen."""
    require_choice(recompute, RECOMPUTE, "recompute")
    out = list(forward)
    for r in forward:
        if _weight_gemm(r):
            n_out, n_in = _in_out(r, tokens)
            gemm = {**r, "batch": 1}
            out.append({**gemm, "op": "linear_dgrad", "m": n_in, "n": tokens, "k": n_out})
            if lora_rank and adapted(r, tokens, skip_widths):
                for a, b in ((n_in, lora_rank), (lora_rank, n_out)):  # adapters A (in -> r), then B (r -> out)
                    out.append({**gemm, "op": "lora", "m": b, "n": tokens, "k": a})
                    out.append({**gemm, "op": "lora_dgrad", "m": a, "n": tokens, "k": b})
                    out.append({**gemm, "op": "lora_wgrad", "m": b, "n": a, "k": tokens})
            elif not lora_rank:
                out.append({**gemm, "op": "linear_wgrad", "m": n_out, "n": n_in, "k": tokens})
        elif r["kind"] == "gemm" and r["op"] == "experts":  # each active expert's own weights (m out, k in) over
            # its n tokens: the input's gradient always, the weights' where they train (LoRA freezes them, unadapted)
            out.append({**r, "op": "experts_dgrad", "m": r["k"], "n": r["n"], "k": r["m"]})
            if not lora_rank:
                out.append({**r, "op": "experts_wgrad", "m": r["m"], "n": r["k"], "k": r["n"]})
        else:
            out += backward(r)
    if recompute == "full":
        out += [{**r, "op": r["op"] + "_recompute"} for r in forward]
    elif recompute == "selective":
        out += [{**r, "op": r["op"] + "_recompute"} for r in forward if r["kind"] in ("attention", "softmax")
                or (r["kind"] == "gemm" and r["op"] == "bmm")]
    return out


def backward(r: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A forward record's backward records, laid out as the record is: a GEMM's or a convolution's two backward
    GEMMs (the input's gradient, then the weights', each its FLOPs), fused attention its backward passes
    (`kinds.attention`), a streaming kernel its op's kernels as autograd launches them (`kinds.streaming.BACKWARD`;
    none for an add of a mask or a constant). `micro_step` lays its weight GEMMs and experts out over the
    micro-batch's tokens first; `lowering.training_step` takes this for every record."""
    if r["kind"] in ("gemm", "conv2d"):
        m, n, k = r["m"], r["n"], r["k"]
        return [{**r, "op": r["op"] + "_dgrad", "m": m, "n": k, "k": n},
                {**r, "op": r["op"] + "_wgrad", "m": n, "n": k, "k": m}]
    if r["kind"] == "attention":
        return [{**r, "op": "flash_bwd", "count": r["count"] * ATTENTION_BACKWARD_PASSES}]
    launches = backward_of(r["op"])[0]
    return [{**r, "op": r["op"] + "_bwd", "count": r["count"] * launches}] if launches else []


def lm_head_loss(tokens: int, hidden: int, vocab: int, dtype_record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The LM head over every token and the cross-entropy's softmax (forward; `micro_step` adds their backward)."""
    return [{**dtype_record, "kind": "gemm", "op": "linear", "batch": 1, "m": vocab, "n": tokens, "k": hidden,
             "count": 1},
            {"kind": "softmax", "op": "softmax", "dtype": "fp32", "acc_dtype": "fp32", "rows": tokens, "cols": vocab,
             "count": 1}]


def optimizer_step(trainable: int, optimizer: str = "adamw") -> list[dict[str, Any]]:
    """One optimizer update of `trainable` parameters in fp32 (AdamW: 7 operands an element; SGD with momentum: 5)."""
    require_choice(optimizer, OPTIMIZERS, "optimizer")
    if trainable <= 0:
        return []
    return [dict(kind="elementwise", op="adamw" if optimizer == "adamw" else "sgd_momentum", dtype="fp32",
                 acc_dtype="fp32", rows=1, cols=int(trainable), count=1)]


def lora_params(forward: list[dict[str, Any]], tokens: int, rank: int, skip_widths: frozenset[int]) -> int:
    """Trainable adapter parameters: r x (in + out) per adapted weight GEMM."""
    return sum(r["count"] * rank * sum(_in_out(r, tokens)) for r in forward if adapted(r, tokens, skip_widths))


def skip_widths(config: Mapping[str, Any], lora_targets: str) -> frozenset[int]:
    """The widths whose GEMMs LoRA leaves alone (see `adapted`) for a (shard's) config."""
    require(lora_targets in LORA_TARGETS, "lora_targets",
            f"unknown {lora_targets!r}; allowed: {', '.join(LORA_TARGETS)}")
    widths = {int(config["vocab_size"])}
    if lora_targets == "attention":
        hidden = hidden_size(config)
        widths.add(int(config.get("intermediate_size") or config.get("ffn_dim") or config.get("n_inner")
                       or 4 * hidden))
    return frozenset(widths)


def shard_config(config: Mapping[str, Any], tp: int = 1, pp: int = 1,
                 expert_parallel: bool = False) -> dict[str, Any]:
    """The config of one GPU's shard under tensor parallelism `tp` and pipeline parallelism `pp`; with
    `expert_parallel` (vLLM's --enable-expert-parallel), a mixture of experts' experts split whole over the `tp` GPUs
    (`expert_parallel_size`, which `features.lower_transformers` reads) instead of each expert's width split.

    Raises:
        InputError: the model's family has no tensor-parallel rule, heads / layers do not divide, or experts split
            over GPUs where the model has none.
    """
    if expert_parallel:
        require(is_mixture_of_experts(config), "expert_parallel", "splits a mixture of experts' experts over the "
                "GPUs; this model is dense (no experts)")
    if tp == 1 and pp == 1:
        return dict(config)
    fam = family(config)
    if fam not in _FIELDS:
        raise InputError("layout", f"tensor and pipeline parallelism are modelled for the {', '.join(_FIELDS)} "
                                   f"families, not {fam}")
    heads_f, inner_f, layers_f, vocab_f = _FIELDS[fam]
    heads, layers = int(config[heads_f]), int(config[layers_f])
    hidden = hidden_size(config)
    inner = int(config.get(inner_f) or 4 * hidden)
    if heads % tp:  # the sizes that do, listed only where the line is said (this runs for every sharded step)
        divisors = ", ".join(str(d) for d in range(1, min(heads, 64) + 1) if heads % d == 0)
        raise InputError("layout.tp", f"{tp} does not divide the model's {heads} attention heads; these do (up to "
                                      f"64): {divisors}")
    require(pp <= layers, "layout.pp", f"{pp} pipeline stages for {layers} layers")
    out = dict(config)
    out["head_dim"] = int(config.get("head_dim") or hidden // heads)
    out[heads_f] = heads // tp
    out[layers_f] = math.ceil(layers / pp)
    out[vocab_f] = math.ceil(int(config[vocab_f]) / tp)
    if expert_parallel:  # each GPU a tp-th of the experts, whole (Mixtral's intermediate_size is an expert's width)
        out["expert_parallel_size"] = tp
    else:
        out[inner_f] = math.ceil(inner / tp)
        if config.get("moe_intermediate_size"):  # a Qwen3-MoE expert's width, split as a dense MLP's is
            out["moe_intermediate_size"] = math.ceil(int(config["moe_intermediate_size"]) / tp)
    if fam == "llama":
        kv = int(config.get("num_key_value_heads") or heads)
        out["num_key_value_heads"] = max(1, kv // tp)  # fewer KV heads than ranks: each rank keeps a copy of one
    return out
