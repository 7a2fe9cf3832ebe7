"""FLOPs and bytes moved (DRAM, L2, shared memory) per kernel launch, vectorised over the kernel table."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from joulecast.features.tiles import gqa_packed

Columns = Mapping[str, np.ndarray]

# Operands read and written per element by an elementwise op, and math per element (rough instruction counts of
# PyTorch's vectorised implementations; transcendental functions go through several SFU/FMA steps).
_INPUTS = {"pointwise_add": 2, "pointwise_mul": 2, "unspecified_tensor": 2, "adamw": 4, "maxpool": 4}
_OUTPUTS = {"adamw": 3, "avgpool": 0}
_FLOPS_PER_ELEMENT = {"gelu": 10, "tanh": 8, "silu": 6, "adamw": 12, "batchnorm": 2, "softmax": 5, "layernorm": 8,
                      "rmsnorm": 4}
# Instruction issue of streaming kernels, in FP32-lane instructions per element (address arithmetic, type
# conversion, reduction passes, the op itself): a kernel also needs elements x this / (SMs x 64 lanes x clock),
# which binds when the SM clock is low against the DRAM bandwidth. 64 FP32 lanes per SM is what the catalog's FP32
# peak implies (A100: 19.5 TFLOP/s = 108 SMs x 64 x 2 x 1.41 GHz; the A10's dual-FP32 peak is halved in physics).
# The counts are assumptions, set by looking at EnergAIzer measurements: at 900 MHz the A100 runs bf16
# transformers 1.3-1.5x slower than a DRAM-bound timeline, the A10 does not (600 GB/s over 72 SMs against
# 1555 GB/s over 108: 0.6 of the A100's DRAM bandwidth per SM-clock); softmax and norms read their input in
# several passes (max, sum, write).
INSTRUCTIONS_PER_ELEMENT = {"elementwise": 16, "softmax": 40, "norm": 40}
# ... and on top of those, transcendental activations' own arithmetic. Accurate (not fast-math) tanhf and erff, and
# the exp and IEEE division of a sigmoid, take about 15-25 FP32 instructions each (an estimate of libdevice's
# polynomial and range-reduction code), two of them on the special function units, which issue 16 results per
# clock per SM against 64 FP32 ones (CUDA C Programming Guide, "Arithmetic Instructions" throughput table, compute
# capability 8.0). Set to 1.5x that count (an assumption, chosen by looking at the data like the counts above): it
# makes the A100's measured/physics time the most uniform across model families (standard deviation of its log over
# GPU-bound bf16 rows at 900 MHz 0.065 without, 0.060 at 1x, 0.059 at 1.5x, 0.061 at 2x, 0.068 at 3x).
TRANSCENDENTAL_INSTRUCTIONS_PER_ELEMENT = {"tanh": 36, "gelu": 36, "silu": 24, "sigmoid": 24}
# Share of the L2 that one kernel's reused working set may occupy before it spills (assumption: half).
L2_USABLE_FRACTION = 0.5


def _lookup(ops: np.ndarray, table: Mapping[str, float], default: float) -> np.ndarray:
    """Per-row value of `table[op]` (backward ops share their forward op's entry); loops over distinct ops only."""
    distinct, inverse = np.unique(ops.astype(str), return_inverse=True)
    values = np.array([table.get(op.removesuffix("_bwd"), default) for op in distinct], dtype=float)
    return values[inverse]


def gemm_traffic(k: Columns, t: Columns, b_in: np.ndarray, b_out: np.ndarray, l2_bytes: float) -> dict[str, np.ndarray]:
    """GEMM / implicit-GEMM conv. Operands are read once when they fit in L2; otherwise the smaller re-read order."""
    m, n, kk, batch = (k[c].astype(float) for c in ("m", "n", "k", "batch"))
    a = np.where(k["kind"] == "conv2d", k["conv_in_elements"] / batch, m * kk) * b_in  # im2col is never materialised
    b = kk * n * b_in
    c = m * n * b_out
    l2h = L2_USABLE_FRACTION * l2_bytes
    reread = np.minimum(a * np.ceil(b / l2h) + b, b * np.ceil(a / l2h) + a)
    partials = np.where(t["split_k"] > 1, m * n * 4.0 * t["split_k"] * 2, 0.0)  # fp32 partial sums, written and read
    dram = batch * (np.where(a + b <= l2h, a + b, reread) + c + partials)
    k_padded = t["k_iters"] * t["tile_k"]
    loads = t["tiles"] * (t["tile_m"] + t["tile_n"]) * k_padded * b_in
    executed = 2.0 * t["tiles"] * t["tile_m"] * t["tile_n"] * k_padded
    return dict(flops=2.0 * m * n * kk * batch, exec_flops=executed, dram_bytes=dram, l2_bytes=loads + batch * c,
                smem_bytes=2.0 * loads)


def attention_traffic(k: Columns, t: Columns, b_in: np.ndarray) -> dict[str, np.ndarray]:
    """Fused attention: Q, K, V, O cross DRAM once; every query block streams its keys and values through L2."""
    bsz, h, hkv, d = (k[c].astype(float) for c in ("batch", "heads", "kv_heads", "head_dim"))
    sq, skv = np.maximum(k["seq_q"], 1.0), np.maximum(k["seq_kv"], 1.0)  # rows of other kinds hold zeros
    causal_fraction = np.where(k["causal"], (skv - (sq - 1) / 2) / skv, 1.0)  # keys visible per query, on average
    flops = 4.0 * bsz * h * sq * skv * d * causal_fraction
    rows = gqa_packed(k)[0].astype(float)  # query rows: a decode step's grouped heads where they are packed
    executed = flops * np.ceil(rows / 16) * 16 / rows  # MMA tiles have at least 16 query rows
    q_and_o = 2.0 * bsz * h * sq * d * b_in
    kv = 2.0 * bsz * hkv * skv * d * b_in
    streamed = t["tiles"] * 2.0 * (skv / t["split_k"]) * d * b_in * causal_fraction
    return dict(flops=flops, exec_flops=executed, dram_bytes=q_and_o + kv, l2_bytes=streamed + q_and_o,
                smem_bytes=2.0 * streamed)


def streaming_traffic(k: Columns, b_in: np.ndarray, b_out: np.ndarray, l2_bytes: float) -> dict[str, np.ndarray]:
    """Elementwise, softmax, norm, embedding: bandwidth-bound; inputs small enough to stay in L2 after their
    producer wrote them are read from L2, not DRAM; outputs are written back to DRAM."""
    kind, ops = k["kind"], k["op"]
    elements = np.where(kind == "elementwise", k["cols"], k["rows"] * k["cols"]).astype(float)
    n_in, n_out = _lookup(ops, _INPUTS, 1), _lookup(ops, _OUTPUTS, 1)
    backward = np.char.endswith(ops.astype(str), "_bwd")
    n_in = np.where(backward, n_in + 1, n_in)  # backward reads the saved input and the incoming gradient
    read, write = elements * n_in * b_in, elements * n_out * b_out
    dram = np.where(read <= L2_USABLE_FRACTION * l2_bytes, 0.0, read) + write
    flops = elements * _lookup(np.where(kind == "softmax", "softmax", ops), _FLOPS_PER_ELEMENT, 1)
    reductions = (kind == "softmax") | (kind == "norm")
    # exec_flops counts 2 per lane-instruction, as the FP32 peak does (an FMA is 2 FLOPs)
    transcendental = np.where(kind == "elementwise", _lookup(ops, TRANSCENDENTAL_INSTRUCTIONS_PER_ELEMENT, 0), 0.0)
    issued = 2.0 * elements * (_lookup(kind, INSTRUCTIONS_PER_ELEMENT, 0) + transcendental)
    return dict(flops=flops, exec_flops=np.maximum(flops, issued), dram_bytes=dram, l2_bytes=read + write,
                smem_bytes=np.where(reductions, read, 0.0))
