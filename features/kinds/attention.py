"""Fused attention (FlashAttention-2; PyTorch's memory-efficient kernel given an explicit mask, op `masked`; a serving
engine's paged decode kernel): the attention rule's grid and traffic, for every attention row at once. A masked row
is lowered non-causal, as its kernel runs (`lower_transformers._attention_core`): every key block is computed, at
MEMORY_EFFICIENT_RATE of FlashAttention-2's rate (assumptions: FlashAttention-2's tiles; the mask's own reads, from L2
across heads, not counted)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from joulecast.data.errors import require
from joulecast.features import arch
from joulecast.features.kinds import KernelKind, PlanOp
from joulecast.features.tiles import ceil_div

Columns = Mapping[str, Any]
EFFICIENCY = arch.ATTENTION_EFFICIENCY
# FlashAttention-2's split-KV kernel, which decodes (`tiles`), runs a query tile of 64 rows whatever the head size
# (`run_mha_fwd_splitkv_dispatch`: "kBlockM = 64; // Fixed for all head dimensions", four warps of 16 rows each), and
# every warp issues its tensor-core MMAs on rows that hold no query: a grouped decode's four query heads (or one
# query) keep the tensor pipes 16 (64) times as busy as their useful work. Time is unchanged (such attention streams
# its keys from DRAM); power follows the executed work. On the H200's decode attention (h200-first, batch 16-64,
# 2,048-8,192 keys, 645-699 W measured) physics power read 579-592 W with 16-row tiles and 661-676 W with these;
# physics energy MAPE of all its rows 11.4 -> 10.4 %, power 7.4 -> 7.0 %; of its 32 held-out rows (h200-holdout,
# never trained on) 9.7 -> 8.8 %, their decode steps 12.6 -> 10.6 % (experiments/h200_holdout.py).
SPLIT_KV_BLOCK_ROWS = 64.0
# PyTorch's memory-efficient SDPA kernel, which runs attention given an explicit mask (op `masked`), is xFormers'
# CUTLASS kernel (aten/src/ATen/native/transformers/cuda/mem_eff_attention): on an A100 its forward ran 5 % slower
# than FlashAttention (v1) on average (xFormers PR #362), and FlashAttention-2 runs about twice FlashAttention's rate
# (Dao 2023, arXiv 2307.08691: 50-73 % of the A100's peak against 25-40 %); xFormers issue #1074 measured the CUTLASS
# forward 2x slower than FlashAttention-2's on an A40 at 512-65,536 tokens. A masked forward runs at this share of
# FlashAttention-2's rate. Its backward stays priced as FlashAttention-2's (`flash_bwd`; not measured here).
MEMORY_EFFICIENT_RATE = 0.5
# FlashAttention-2's backward does 2.5x the forward's FLOPs (five matmuls against two; Dao 2023, arXiv 2307.08691,
# section 3.2): lowered as BACKWARD_PASSES records of the forward kernel (op `flash_bwd`), each doing
# BACKWARD_FLOPS_PER_PASS of its FLOPs at the forward's rate (an assumption: its measured rate is lower still).
BACKWARD_PASSES = 2
BACKWARD_FLOPS_PER_PASS = 2.5 / BACKWARD_PASSES


def gqa_packed(k: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(query rows per attention CTA row block, heads with a CTA of their own). FlashAttention-2 decodes one query
    token of grouped-query attention with the query heads that share a key-value head as the rows of one CTA
    (flash_api.cpp, `seqlenq_ngroups_swapped`), so each key and value is streamed once per key-value head, not once
    per query head. On the H200 (data/measurements/h200/h200-first, 32 query and 8 key-value heads) such decode
    attention ran 2.1-2.2x faster than physics streaming them per query head, at batch 16-64. A serving engine's own
    decode kernel (op `paged`, `arch.SERVING_ENGINES`) keeps a block per query head."""
    seq_q = np.maximum(k["seq_q"], 1)  # rows of other kinds hold zeros
    heads, kv_heads = k["heads"], np.maximum(k["kv_heads"], 1)
    packed = (k["op"] == "flash") & (seq_q == 1) & (heads > kv_heads)  # not a serving engine's paged kernel
    return np.where(packed, heads // kv_heads, seq_q), np.where(packed, kv_heads, heads)


def tiles(k: Columns, traits: arch.ArchTraits, sm_count: int) -> dict[str, np.ndarray]:
    """FlashAttention-2 grid: one CTA per (batch, head, 128 query rows); decode (<= 16 queries) splits the keys
    into 512-key chunks instead (flash-decoding), so a single query still fills the GPU (a grouped query's heads
    share one, `gqa_packed`)."""
    rows, heads = gqa_packed(k)
    seq_kv = np.maximum(k["seq_kv"], 1)
    q_blocks = ceil_div(rows, 128)
    kv_split = np.where(rows <= 16, ceil_div(seq_kv, 512), 1)
    n = k["batch"] * heads * q_blocks * kv_split
    ones = np.ones_like(n)
    return dict(tile_m=np.minimum(rows, 128), tile_n=np.full_like(n, 64), tile_k=k["head_dim"],
                ctas_per_sm=ones * traits.tc_ctas_per_sm, split_k=kv_split, tiles=n,
                k_iters=ceil_div(ceil_div(seq_kv, kv_split), 64))


def visible_fraction(k: Columns) -> np.ndarray:
    """Per row, the share of its keys a query sees on average: (seq_kv - (seq_q - 1) / 2) / seq_kv where causal."""
    sq, skv = np.maximum(k["seq_q"], 1.0), np.maximum(k["seq_kv"], 1.0)  # rows of other kinds hold zeros
    return np.where(k["causal"], (skv - (sq - 1) / 2) / skv, 1.0)


def traffic(k: Columns, t: Columns, b_in: np.ndarray) -> dict[str, np.ndarray]:
    """Q, K, V, O cross DRAM once; every query block streams its keys and values through L2."""
    bsz, h, hkv, d = (k[c].astype(float) for c in ("batch", "heads", "kv_heads", "head_dim"))
    sq, skv = np.maximum(k["seq_q"], 1.0), np.maximum(k["seq_kv"], 1.0)  # rows of other kinds hold zeros
    causal_fraction = visible_fraction(k)
    passes = np.where(k["op"] == "flash_bwd", BACKWARD_FLOPS_PER_PASS, 1.0)
    flops = 4.0 * bsz * h * sq * skv * d * causal_fraction * passes
    rows = gqa_packed(k)[0].astype(float)  # query rows: a decode step's grouped heads where they are packed
    # MMA tiles have at least 16 query rows; the split-KV decode's, SPLIT_KV_BLOCK_ROWS
    tile = np.where((k["op"] == "flash") & (rows <= 16), SPLIT_KV_BLOCK_ROWS, 16.0)
    executed = flops * np.ceil(rows / tile) * tile / rows
    q_and_o = 2.0 * bsz * h * sq * d * b_in
    kv = 2.0 * bsz * hkv * skv * d * b_in
    streamed = t["tiles"] * 2.0 * (skv / t["split_k"]) * d * b_in * causal_fraction
    return dict(flops=flops, exec_flops=executed, stall_flops=np.zeros_like(executed), dram_bytes=q_and_o + kv,
                l2_bytes=streamed + q_and_o, smem_bytes=2.0 * streamed)


def efficiency(k: Columns, t: Columns) -> np.ndarray:
    """Fraction of peak per row: `arch.ATTENTION_EFFICIENCY` over a long run of key blocks, less where a CTA's own
    prologue and epilogue (loading its query tile; rescaling and storing its output) weigh against few of them, as a
    GEMM tile's do (`arch.GEMM_TILE_OVERHEAD_K_STEPS`, the same 4 steps: assumption); a causal CTA sees about half
    its keys. On the H200's prefill attention (data/measurements/h200/h200-first: causal, 128-wide heads) physics
    read 502 TFLOP/s at 512 tokens and 600-650 at 2,048-8,192 against 299 and 408-534 measured; with it 312 and
    511-619. Physics energy MAPE of those four rows and six decode ones 19.4 -> 13.2 %, of all H200 rows 16.7 ->
    15.6 %; EnergAIzer's rows (eager attention) do not move."""
    blocks = t["k_iters"] * visible_fraction(k)
    rate = np.where(k["op"] == "masked", MEMORY_EFFICIENT_RATE, 1.0)
    return EFFICIENCY * rate * blocks / (blocks + arch.GEMM_TILE_OVERHEAD_K_STEPS)


def _check(s: dict[str, Any], given: Mapping[str, Any], field: str) -> None:
    require(s["heads"] % s["kv_heads"] == 0, f"{field}.kv_heads", "must divide heads")
    s["causal"] = bool(given.get("causal", s["seq_q"] > 1))


def _add(builder: Any, s: Mapping[str, Any]) -> None:
    builder.attention(s["batch"], s["heads"], s["kv_heads"], s["seq_q"], s["seq_kv"], s["head_dim"], bool(s["causal"]))


def _run(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
    q = rand(s["batch"], s["heads"], s["seq_q"], s["head_dim"], dtype=dtype)
    k, v = (rand(s["batch"], s["kv_heads"], s["seq_kv"], s["head_dim"], dtype=dtype) for _ in range(2))
    gqa, causal = s["heads"] != s["kv_heads"], bool(s["causal"])
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return (lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=gqa)), (q, k, v)


KIND = KernelKind(name="attention", order=1, sizes=("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"),
                  rule="attention",
                  plan_ops=(PlanOp("attention", ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"), _add,
                                   _run, check=_check, options=("causal",)),))
