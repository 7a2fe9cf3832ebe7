"""The streaming rule: elementwise, embedding, softmax and norm kernels, bandwidth-bound, their grids as PyTorch ATen
launches them and their traffic, for every streaming row at once; each kind gives its parameters
(`kinds.Streaming`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from joulecast.features import arch
from joulecast.features.kinds import per_kind
from joulecast.features.tiles import ceil_div

Columns = Mapping[str, Any]

# Operands read and written per element by an elementwise op, and math per element (rough instruction counts of
# PyTorch's vectorised implementations; transcendental functions go through several SFU/FMA steps).
# The fused kernels (`joulecast.data.fusions`): swiglu reads the gate and the up projection (silu, then the
# multiply); rope reads x (its cos / sin tables, a sequence's worth, stay in cache): x cos + rotate_half(x) sin.
INPUTS = {"pointwise_add": 2, "pointwise_mul": 2, "unspecified_tensor": 2, "adamw": 4, "sgd_momentum": 3, "maxpool": 4,
          "swiglu": 2}
OUTPUTS = {"adamw": 3, "sgd_momentum": 2, "avgpool": 0}
FLOPS_PER_ELEMENT = {"gelu": 10, "tanh": 8, "silu": 6, "adamw": 12, "sgd_momentum": 4, "batchnorm": 2, "softmax": 5,
                     "layernorm": 8, "rmsnorm": 4, "swiglu": 7, "rope": 3}
# Instruction issue of streaming kernels (each kind's `instructions_per_element`), in FP32-lane instructions per
# element (address arithmetic, type conversion, reduction passes, the op itself): a kernel also needs elements x
# this / (SMs x 64 lanes x clock), which binds when the SM clock is low against the DRAM bandwidth. 64 FP32 lanes per
# SM is what the catalog's FP32 peak implies (A100: 19.5 TFLOP/s = 108 SMs x 64 x 2 x 1.41 GHz; the A10's dual-FP32
# peak is halved in physics). The counts are assumptions, set by looking at EnergAIzer measurements: at 900 MHz the
# A100 runs bf16 transformers 1.3-1.5x slower than a DRAM-bound timeline, the A10 does not (600 GB/s over 72 SMs
# against 1555 GB/s over 108: 0.6 of the A100's DRAM bandwidth per SM-clock); softmax and norms read their input in
# several passes (max, sum, write): elementwise 16, softmax and norm 40.
# ... and on top of those, transcendental activations' own arithmetic. Accurate (not fast-math) tanhf and erff, and
# the exp and IEEE division of a sigmoid, take about 15-25 FP32 instructions each (an estimate of libdevice's
# polynomial and range-reduction code), two of them on the special function units, which issue 16 results per
# clock per SM against 64 FP32 ones (CUDA C Programming Guide, "Arithmetic Instructions" throughput table, compute
# capability 8.0). Set to 1.5x that count (an assumption, chosen by looking at the data like the counts above): it
# makes the A100's measured/physics time the most uniform across model families (standard deviation of its log over
# GPU-bound bf16 rows at 900 MHz 0.065 without, 0.060 at 1x, 0.059 at 1.5x, 0.061 at 2x, 0.068 at 3x).
TRANSCENDENTAL_INSTRUCTIONS_PER_ELEMENT = {"tanh": 36, "gelu": 36, "silu": 24, "sigmoid": 24, "swiglu": 24}
_CTAS = {"elements": 0, "rows": 1, "softmax": 2}


def _param(kind: Any, name: str, default: float = 0.0) -> np.ndarray:
    """Per row, its kind's streaming parameter `name` (`default` where the kind has none)."""
    def value(k: Any) -> float:
        v = getattr(k.streaming, name) if k.streaming else None
        return default if v is None else v
    return per_kind(kind, value, default, key=f"streaming.{name}.{default}")


def elements(k: Columns) -> np.ndarray:
    """Elements a streaming row moves: its `cols` for a flat kernel, `rows x cols` for one over rows."""
    flat = per_kind(k["kind"], lambda kk: bool(kk.streaming and kk.streaming.elements == "cols"),
                    key="streaming.flat") > 0
    return np.where(flat, k["cols"], k["rows"] * k["cols"])


def tiles(k: Columns, traits: arch.ArchTraits) -> dict[str, np.ndarray]:
    """Grids (PyTorch ATen launch shapes, see `arch`): elementwise and embedding kernels 512 elements a CTA, norms
    a CTA a row, the persistent softmax 4 rows a CTA up to 1,024 columns and a row a CTA above."""
    moved = elements(k)
    rule = per_kind(k["kind"], lambda kk: _CTAS[kk.streaming.ctas] if kk.streaming else 0, key="streaming.ctas")
    softmax = np.where(k["cols"] <= arch.SOFTMAX_PERSISTENT_MAX_COLS, ceil_div(k["rows"], arch.SOFTMAX_ROWS_PER_CTA),
                       k["rows"])
    n = np.where(rule == _CTAS["softmax"], softmax,
                 np.where(rule == _CTAS["rows"], k["rows"], ceil_div(moved, arch.ELEMENTWISE_ELEMENTS_PER_CTA)))
    per_sm = traits.threads_per_sm // arch.STREAMING_THREADS_PER_CTA
    ones = np.ones_like(n)
    return dict(tile_m=ones, tile_n=np.minimum(moved, arch.ELEMENTWISE_ELEMENTS_PER_CTA), tile_k=ones,
                ctas_per_sm=ones * per_sm, split_k=ones, tiles=np.maximum(n, 1), k_iters=ones)


def _by_op(ops: Any, table: Mapping[str, float], default: float) -> np.ndarray:
    """Per-row value of `table[op]` (backward ops share their forward op's entry); once per distinct op."""
    return ops.lookup(table, default, key=lambda op: op.removesuffix("_bwd"))


def traffic(k: Columns, b_in: np.ndarray, b_out: np.ndarray, l2_bytes: float) -> dict[str, np.ndarray]:
    """Inputs small enough to stay in L2 after their producer wrote them are read from L2, not DRAM; outputs are
    written back to DRAM."""
    kind, ops = k["kind"], k["op"]
    moved = elements(k).astype(float)
    n_in, n_out = _by_op(ops, INPUTS, 1), _by_op(ops, OUTPUTS, 1)
    backward = ops.test(lambda op: op.endswith("_bwd"))
    n_in = np.where(backward, n_in + 1, n_in)  # backward reads the saved input and the incoming gradient
    read, write = moved * n_in * b_in, moved * n_out * b_out
    dram = np.where(read <= arch.L2_USABLE_FRACTION * l2_bytes, 0.0, read) + write
    fixed = _param(kind, "flops_per_element", np.nan)
    flops = moved * np.where(np.isnan(fixed), _by_op(ops, FLOPS_PER_ELEMENT, 1), fixed)
    reductions = _param(kind, "reduction") > 0
    # exec_flops counts 2 per lane-instruction, as the FP32 peak does (an FMA is 2 FLOPs)
    transcendental = np.where(_param(kind, "transcendental") > 0,
                              _by_op(ops, TRANSCENDENTAL_INSTRUCTIONS_PER_ELEMENT, 0), 0.0)
    issued = 2.0 * moved * (_param(kind, "instructions_per_element") + transcendental)
    return dict(flops=flops, exec_flops=np.maximum(flops, issued), dram_bytes=dram, l2_bytes=read + write,
                smem_bytes=np.where(reductions, read, 0.0))
