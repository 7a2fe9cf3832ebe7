"""Lowering of transformer configs (GPT-2, BERT, OPT, Llama/Qwen2/Qwen3/Mistral/Mixtral, ViT) to kernel records.

The ``eager`` attention path follows Hugging Face's eager PyTorch code kernel by kernel, as the EnergAIzer tracer
recorded it (shared/data/external/energaizer-artifact/workloads): the tracer records GEMMs, softmax, norms and
elementwise math, but not embedding gathers or the attention's layout copies. Both are kept here because they are
real kernels with real DRAM traffic; the kernel-list reader adds the same four copies per traced attention
(`joulecast.features.kernel_list`), so that traced and lowered kernel lists of the same workload are interchangeable.
The ``flash`` path replaces the attention core (scores GEMM, scale, mask, softmax, value GEMM) with one fused
kernel, as FlashAttention-2 / SDPA do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from joulecast.data.errors import InputError
from joulecast.data.models import QK_NORM_TYPES, config_size, is_mixture_of_experts
from joulecast.features.builder import KernelBuilder


@dataclass(frozen=True)
class Shape:
    """The token geometry of one pass."""

    batch: int
    seq_q: int     # query tokens per sequence (1 for a decode step)
    seq_kv: int    # keys per sequence (context length, including the new token)
    decode: bool

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_q


def _attention_core(b: KernelBuilder, s: Shape, heads: int, kv_heads: int, head_dim: int, causal: bool,
                    attention: str, eager_ops: tuple[tuple[str, str | None, str | None], ...], softmax_dtype: str | None,
                    ops_after_softmax: tuple[tuple[str, str | None, str | None], ...] = ()) -> None:
    """Scores, softmax and weighted values, eager (op list per model) or fused; fused with an explicit mask, the
    kernel is told no causality (the mask carries it) and computes every key block."""
    queries = s.batch * heads * s.seq_q * head_dim
    if attention in ("flash", "masked"):
        masked = attention == "masked"
        b.attention(s.batch, heads, kv_heads, s.seq_q, s.seq_kv, head_dim, causal and not masked,
                    op="masked" if masked else "flash")
        if "attention_layout" not in b.fusions:
            b.ew("copy", queries)  # the output's heads merged back: transpose(1, 2).contiguous()
        return
    bh, scores = s.batch * heads, s.batch * heads * s.seq_q * s.seq_kv
    # Layout copies (see joulecast.features.kernel_list): torch.matmul copies Q, K and V viewed as (batch, heads, seq,
    # dim) into 3-D batches (K and V at all heads after repeat_kv), and the output's heads are merged back.
    keys = s.batch * heads * s.seq_kv * head_dim
    for elements in (queries, keys, keys, queries):
        b.ew("copy", elements)
    b.bmm(bh, s.seq_q, s.seq_kv, head_dim)
    for op, dtype, out in eager_ops:
        b.ew(op, scores, dtype=dtype, out=out)
    b.softmax(bh * s.seq_q, s.seq_kv, dtype=softmax_dtype)
    for op, dtype, out in ops_after_softmax:
        b.ew(op, scores, dtype=dtype, out=out)
    b.bmm(bh, s.seq_q, head_dim, s.seq_kv)


def _kv_cache_append(b: KernelBuilder, s: Shape, kv_heads: int, head_dim: int, attention: str) -> None:
    """Decode: eager HF concatenates the whole cache each step (torch.cat); serving engines write in place."""
    if s.decode:
        per_seq = s.seq_kv if attention == "eager" else 1
        b.ew("copy", s.batch * per_seq * kv_heads * head_dim, count=2)


_UPCAST = (("typecast_to_fp32", None, "fp32"), ("typecast_to_bf16", "fp32", "bf16"))


def gpt2(b: KernelBuilder, c: Mapping[str, Any], s: Shape, attention: str, lm_head: bool) -> None:
    h, layers, heads = config_size(c, "n_embd"), config_size(c, "n_layer"), config_size(c, "n_head")
    # head_dim is set only on a tensor-parallel shard (`joulecast.features.train_step`), whose heads x head_dim < h
    inner, d, t = c.get("n_inner") or 4 * h, c.get("head_dim") or h // heads, s.tokens
    b.embedding(t, h, config_size(c, "vocab_size"))
    b.embedding(t, h, config_size(c, "n_positions"))
    b.ew("pointwise_add", t * h)
    with b.repeat(layers):
        b.norm("layernorm", t, h)
        b.linear(3 * heads * d, t, h, tokens_first=True)
        _kv_cache_append(b, s, heads, d, attention)
        # scores / sqrt(d) (a 0-dim tensor divisor), then torch.where(causal_mask, scores, min): the tracer records
        # the division (as "unspecified_tensor") but not the where
        _attention_core(b, s, heads, heads, d, True, attention, (("scalar_div", None, None), ("where", None, None)), None)
        b.linear(h, t, heads * d, tokens_first=True)
        b.ew("pointwise_add", t * h)
        b.norm("layernorm", t, h)
        b.linear(inner, t, h, tokens_first=True)
        if "gemm_activation" in b.fusions:
            pass  # in the GEMM's epilogue
        elif "activation" in b.fusions:
            b.ew("gelu", t * inner)  # one fused kernel
        else:
            for op in ("scalar_mul", "unspecified_scalar", "scalar_mul", "pointwise_add", "scalar_mul", "tanh",
                       "scalar_mul", "pointwise_mul"):  # gelu_new, unfused: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
                b.ew(op, t * inner)
        b.linear(h, t, inner, tokens_first=True)
        b.ew("pointwise_add", t * h)
    b.norm("layernorm", t, h)
    if lm_head:
        _lm_head(b, c, s, h)


def bert(b: KernelBuilder, c: Mapping[str, Any], s: Shape, attention: str, lm_head: bool) -> None:
    h, layers, heads, inner = (config_size(c, "hidden_size"), config_size(c, "num_hidden_layers"),
                               config_size(c, "num_attention_heads"), config_size(c, "intermediate_size"))
    d, t = h // heads, s.tokens
    positions = config_size(c, "max_position_embeddings")
    for rows in (config_size(c, "vocab_size"), positions, c.get("type_vocab_size") or 2):
        b.embedding(t, h, rows)
    b.ew("pointwise_add", t * h)
    b.norm("layernorm", t, h)
    b.ew("scalar_mul", t)  # the extended attention mask, (1 - mask) * min
    with b.repeat(layers):
        b.linear(h, t, h, count=3)
        _kv_cache_append(b, s, heads, d, attention)
        _attention_core(b, s, heads, heads, d, False, attention,
                        (("unspecified_scalar", None, None), ("mask_add", None, None)), None)
        b.linear(h, t, h)
        b.ew("pointwise_add", t * h)
        b.norm("layernorm", t, h)
        _mlp(b, t, h, inner, "gelu")
        b.norm("layernorm", t, h)
    b.linear(h, s.batch, h)  # pooler
    b.ew("tanh", s.batch * h)


def opt(b: KernelBuilder, c: Mapping[str, Any], s: Shape, attention: str, lm_head: bool) -> None:
    h, layers, heads, ffn = (config_size(c, "hidden_size"), config_size(c, "num_hidden_layers"),
                             config_size(c, "num_attention_heads"), config_size(c, "ffn_dim"))
    # head_dim is set only on a tensor-parallel shard (`joulecast.features.train_step`), whose heads x head_dim < h
    d, t = c.get("head_dim") or h // heads, s.tokens
    b.ew("pointwise_add", s.batch * s.seq_q * s.seq_kv, dtype="fp32")  # causal mask
    b.ew("pointwise_mul", s.batch * s.seq_kv, dtype="fp32")            # positions from the attention mask
    b.embedding(t, h, config_size(c, "vocab_size"))
    b.embedding(t, h, config_size(c, "max_position_embeddings") + 2)
    b.ew("pointwise_add", t * h)
    with b.repeat(layers):
        b.norm("layernorm", t, h)
        b.linear(heads * d, t, h)
        if attention == "eager":
            b.ew("scalar_mul", t * heads * d)  # q * head_dim**-0.5
        b.linear(heads * d, t, h, count=2)
        _kv_cache_append(b, s, heads, d, attention)
        _attention_core(b, s, heads, heads, d, True, attention, (("mask_add", None, None), *_UPCAST), "fp32")
        b.linear(h, t, heads * d)
        b.ew("pointwise_add", t * h)
        b.norm("layernorm", t, h)
        _mlp(b, t, h, ffn, "relu")
    b.norm("layernorm", t, h)
    if lm_head:
        _lm_head(b, c, s, h)


def _mlp(b: KernelBuilder, t: int, h: int, inner: int, act: str) -> None:
    """Two-layer MLP with an unfused activation (in the first GEMM's epilogue with the "gemm_activation" fusion) and
    the residual add."""
    b.linear(inner, t, h)
    if "gemm_activation" not in b.fusions:
        b.ew(act, t * inner)
    b.linear(h, t, inner)
    b.ew("pointwise_add", t * h)


def _rmsnorm(b: KernelBuilder, t: int, h: int, with_residual: bool = False) -> None:
    """HF's RMSNorm runs unfused in eager mode: x^2 (fp32), mean + eps, rsqrt, x * r, weight * x (bf16); one kernel
    with the "norm" fusion, which `with_residual` also adds the residual stream in (the "residual_norm" fusion)."""
    if "norm" in b.fusions:
        b.norm("add_rmsnorm" if with_residual else "rmsnorm", t, h)
        return
    for op, elements, dtype in (("unspecified_scalar", t * h, "fp32"), ("scalar_add", t, "fp32"),
                                ("unspecified_scalar", t, "fp32"), ("pointwise_mul", t * h, "fp32"), ("scalar_mul", t * h, None)):
        b.ew(op, elements, dtype=dtype)


def llama(b: KernelBuilder, c: Mapping[str, Any], s: Shape, attention: str, lm_head: bool) -> None:
    """Llama, Qwen2, Qwen3, Mistral and the mixtures of experts Mixtral and Qwen3-MoE share one structure: RMSNorm,
    rotary, grouped-query attention (Qwen3's queries and keys normalised first), a gated SiLU MLP (a mixture's a
    sparse mixture of such experts, `_experts`)."""
    h, layers, heads, inner = (config_size(c, "hidden_size"), config_size(c, "num_hidden_layers"),
                               config_size(c, "num_attention_heads"), config_size(c, "intermediate_size"))
    kv_heads = c.get("num_key_value_heads") or heads
    d, t = c.get("head_dim") or h // heads, s.tokens
    # Rotary tables: inv_freq outer positions (an fp32 GEMM with K = 1), then cos and sin scaled.
    b.fp32_gemm(d // 2, s.seq_q, 1)
    b.ew("scalar_mul", s.seq_q * d, dtype="fp32", count=2)
    b.embedding(t, h, config_size(c, "vocab_size"))
    packed, add_norm = "packed_projections" in b.fusions, {"norm", "residual_norm"} <= b.fusions
    experts, qk_norm = expert_counts(c), c.get("model_type") in QK_NORM_TYPES
    with b.repeat(layers):
        _rmsnorm(b, t, h, with_residual=add_norm)
        if packed:
            b.linear((heads + 2 * kv_heads) * d, t, h)
        else:
            b.linear(heads * d, t, h)
            b.linear(kv_heads * d, t, h, count=2)
        if qk_norm:  # Qwen3: each head's queries and keys RMS-normalised over head_dim
            _rmsnorm(b, t * heads, d)
            _rmsnorm(b, t * kv_heads, d)
        for elements in (t * heads * d, t * kv_heads * d):  # q and k: x*cos + rotate_half(x)*sin
            if "rope" in b.fusions:
                b.ew("rope", elements)  # reads x (the cos / sin tables stay in cache), writes the rotated x
                continue
            b.ew("pointwise_mul", elements, count=2)
            b.ew("pointwise_add", elements)
        _kv_cache_append(b, s, kv_heads, d, attention)
        _attention_core(b, s, heads, kv_heads, d, True, attention,
                        (("scalar_mul", None, None), ("mask_add", None, None), *_UPCAST), "fp32")
        b.linear(h, t, heads * d)
        if not add_norm:
            b.ew("pointwise_add", t * h)
        _rmsnorm(b, t, h, with_residual=add_norm)
        if experts:
            _experts(b, t, h, *experts, expert_shards(c))
        else:
            _gated_mlp(b, t, h, inner, packed)
        if not add_norm:
            b.ew("pointwise_add", t * h)
    # with the residual fusion, 2 x layers norms take a residual in and this one none: vLLM's count, whose plain norm
    # is the first layer's (no residual yet) and whose final one takes the last layer's
    _rmsnorm(b, t, h)
    if lm_head:
        _lm_head(b, c, s, h)


def _gated_mlp(b: KernelBuilder, t: int, h: int, inner: int, packed: bool) -> None:
    """Gate and up projections (one GEMM with the "packed_projections" fusion), SiLU, their product, down."""
    if packed:
        b.linear(2 * inner, t, h)
    else:
        b.linear(inner, t, h)
    if "activation" not in b.fusions:
        b.ew("silu", t * inner)
    if not packed:
        b.linear(inner, t, h)
    # silu(gate) * up; with the "activation" fusion one kernel reading both (Megatron's fused SwiGLU)
    b.ew("swiglu" if "activation" in b.fusions else "pointwise_mul", t * inner)
    b.linear(h, t, inner)


def expert_counts(c: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(experts held, experts a token is routed to, each expert's MLP width) of a mixture-of-experts config, or None
    for a dense one: Mixtral's `num_local_experts` and `intermediate_size`, Qwen3-MoE's `num_experts` and
    `moe_intermediate_size` (its `intermediate_size` a dense layer's, which none of its layers is where
    `decoder_sparse_step` is 1 and `mlp_only_layers` empty), `num_experts_per_tok` both."""
    if not is_mixture_of_experts(c):
        return None
    held = config_size(c, "num_local_experts", "num_experts")
    routed, width = config_size(c, "num_experts_per_tok"), config_size(c, "moe_intermediate_size", "intermediate_size")
    if routed > held:
        raise InputError("config.num_experts_per_tok", f"must be at most the experts held ({held}), got {routed}")
    if c.get("mlp_only_layers") or (c.get("decoder_sparse_step") or 1) != 1:
        raise InputError("config.mlp_only_layers", "dense layers among a mixture of experts' are not modelled: "
                                                   "every layer's MLP must be sparse (decoder_sparse_step 1, no "
                                                   "mlp_only_layers)")
    return held, routed, width


def expert_shards(c: Mapping[str, Any]) -> int:
    """The GPUs a mixture of experts' experts are split over in this shard (`expert_parallel_size`, which
    `features.train_step.shard_config` sets under expert parallelism); 1 where each GPU runs every expert."""
    return int(c.get("expert_parallel_size") or 1)


def active_experts(tokens: Any, held: int, routed: int, shards: int = 1) -> Any:
    """The experts a pass over `tokens` tokens runs (a count, or an array of them): held x (1 - (1 - routed /
    held)^tokens), each token's `routed` experts drawn alike and apart (an assumption: a trained router's choices are
    skewed, and fewer experts run where they are), so a decode step of one token runs `routed` and a prefill of many
    runs every expert. With the experts split over `shards` GPUs (expert parallelism), the busiest GPU's, which
    the step waits for: the expected most of `shards` GPUs each running its ceil(held / shards) experts as that
    many draws of the same chance (`_expected_most`), and at least ceil(routed / shards). Rounded from
    `expected_experts`: a kernel runs whole experts."""
    out = np.round(expected_experts(tokens, held, routed, shards)).astype(np.int64)
    return int(out) if out.ndim == 0 else out


def expected_experts(tokens: Any, held: int, routed: int, shards: int = 1) -> np.ndarray:
    """`active_experts` before its rounding: the expectation (the busiest GPU's under expert parallelism), within
    its bounds."""
    hit = _hit(tokens, held, routed)
    local = -(-held // shards)
    expected = held * hit if shards == 1 else _expected_most(local, hit, shards)
    return np.minimum(local, np.maximum(-(-routed // shards), expected))


def _hit(tokens: Any, held: int, routed: int) -> np.ndarray:
    """The chance that a pass over `tokens` tokens runs a given expert, each token's `routed` drawn alike and apart."""
    return 1.0 - (1.0 - routed / held) ** np.asarray(tokens, dtype=float)


def _expected_most(n: int, p: np.ndarray, shards: int) -> np.ndarray:
    """The expected largest of `shards` independent Binomial(n, p) counts: the sum over j < n of P(max > j) = 1 -
    F(j)^shards, F the binomial distribution function, built up by its probabilities' ratio (a loop over the n
    counts, vectorised over p)."""
    p = np.clip(p, 0.0, 1.0 - 1e-12)
    term, cdf, most = (1.0 - p) ** n, np.zeros_like(p), np.zeros_like(p)
    for j in range(n):
        cdf = cdf + term
        most += 1.0 - np.minimum(cdf, 1.0) ** shards
        term = term * (n - j) / (j + 1) * p / (1.0 - p)
    return most


def expert_block(c: Mapping[str, Any], tokens: int, dtype: str, layers: int = 1) -> list[dict[str, Any]]:
    """The kernel records of a mixture's expert block over a pass of `tokens` tokens in the shard `c`, as `_experts`
    lowers it (under expert parallelism the busiest GPU's), once or `layers` times."""
    held, routed, inner = expert_counts(c)
    b = KernelBuilder(dtype=dtype)
    with b.repeat(layers):
        _experts(b, tokens, config_size(c, "hidden_size"), held, routed, inner, expert_shards(c))
    return b.records


def expert_gemms(c: Mapping[str, Any], tokens: int, dtype: str) -> tuple[list[dict[str, Any]], float, float]:
    """A mixture's grouped expert GEMMs over a pass of `tokens` tokens, every layer's (`expert_block`, over the
    whole experts `active_experts` rounds to), and against those: the experts the busiest GPU runs in expectation
    (`expected_experts`), and those a GPU runs on average, the experts the tokens run, held x (1 - (1 - routed /
    held)^tokens), over the GPUs (both 1 where every GPU runs all its experts)."""
    held, routed, _ = expert_counts(c)
    shards = expert_shards(c)
    records = expert_block(c, tokens, dtype, config_size(c, "num_hidden_layers"))
    lowered = active_experts(tokens, held, routed, shards)
    mean = held * float(_hit(tokens, held, routed)) / shards
    busiest = float(expected_experts(tokens, held, routed, shards))
    return [r for r in records if r["op"] == "experts"], busiest / lowered, min(mean, busiest) / lowered


def _experts(b: KernelBuilder, t: int, h: int, held: int, routed: int, inner: int, shards: int = 1) -> None:
    """A sparse mixture-of-experts block as vLLM's fused_moe runs it (vllm/model_executor/layers/fused_moe): the
    router's logits (a GEMM, `held` wide), top-k over their softmax (one kernel), the tokens' slots sorted by expert
    (moe_align_block_size), each active expert's gate and up projections as one grouped GEMM over the tokens routed
    to it (shared out evenly), SiLU times up (silu_and_mul), the down projection, and the k outputs a token summed by
    their routing weights (moe_sum, counted as a copy of the k outputs); in an 8-bit checkpoint each grouped GEMM's
    input quantized first (`KernelBuilder.quantize`). Hugging Face's eager loop, a GEMM an expert,
    is not modelled. With expert parallelism over `shards` GPUs (vLLM's --enable-expert-parallel, tokens already on
    every GPU of the tensor-parallel group) each GPU holds its share of the experts whole and runs the router, the
    sort, silu_and_mul and the sum over every slot (fused_experts sizes its buffers so, and a slot whose expert is
    another GPU's writes zeros), the grouped GEMMs over its own experts' slots alone."""
    active, slots = active_experts(t, held, routed, shards), t * routed
    local = -(-held // shards)
    b.linear(held, t, h)
    b.softmax(t, held, dtype="fp32")
    b.ew("copy", slots, dtype="fp32")
    b.quantize(t * h)  # an 8-bit checkpoint's tokens once (fused_experts), then each slot's SiLU-and-mul output
    b.experts(2 * inner, slots, h, active, local, shards)
    b.ew("swiglu", slots * inner)
    b.quantize(slots * inner)
    b.experts(h, slots, inner, active, local, shards)
    b.ew("copy", slots * h)


def _lm_head(b: KernelBuilder, c: Mapping[str, Any], s: Shape, h: int) -> None:
    """Logits for the last token of each sequence (as serving engines compute them)."""
    b.linear(config_size(c, "vocab_size"), s.batch, h)


def vit(b: KernelBuilder, c: Mapping[str, Any], s: Shape, attention: str, lm_head: bool) -> None:
    h, layers, heads, inner = (config_size(c, "hidden_size"), config_size(c, "num_hidden_layers"),
                               config_size(c, "num_attention_heads"), config_size(c, "intermediate_size"))
    image, patch = config_size(c, "image_size"), config_size(c, "patch_size")
    b.conv2d(s.batch, c.get("num_channels") or 3, h, image, patch, patch, 0)
    tokens_per_image = (image // patch) ** 2 + 1  # patches + CLS
    vs = Shape(s.batch, tokens_per_image, tokens_per_image, False)
    transformer_encoder(b, vs, h, layers, heads, inner, "gelu", attention)
    b.linear(h, s.batch, h)  # pooler, as in the traced ViTModel
    b.ew("tanh", s.batch * h)


def transformer_encoder(b: KernelBuilder, s: Shape, h: int, layers: int, heads: int, inner: int, act: str,
                        attention: str, add_positions: bool = True) -> None:
    """A pre-LayerNorm encoder stack (ViT, MobileViT): fp32 softmax as HF's ViT attention computes it."""
    t, d = s.tokens, h // heads
    if add_positions:
        b.ew("scalar_add", t * h)
    with b.repeat(layers):
        b.norm("layernorm", t, h)
        b.linear(h, t, h, count=3)
        _attention_core(b, s, heads, heads, d, False, attention, (("scalar_mul", None, None),), "fp32", _UPCAST)
        b.linear(h, t, h)
        b.ew("pointwise_add", t * h)
        b.norm("layernorm", t, h)
        _mlp(b, t, h, inner, act)
    b.norm("layernorm", t, h)
