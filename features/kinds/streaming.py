"""The streaming rule: elementwise, embedding, softmax and norm kernels, bandwidth-bound, their grids as PyTorch ATen
launches them and their traffic, for every streaming row at once; each kind gives its parameters
(`kinds.Streaming`)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from joulecast.features import arch
from joulecast.features import kinds
from joulecast.features.tiles import ceil_div

Columns = Mapping[str, Any]

# Operands read and written per element by an elementwise op, and math per element (rough instruction counts of
# PyTorch's vectorised implementations; transcendental functions go through several SFU/FMA steps).
# The fused kernels (`joulecast.data.fusions`): swiglu reads the gate and the up projection (silu, then the
# multiply); rope reads x (its cos / sin tables, a sequence's worth, stay in cache): x cos + rotate_half(x) sin;
# add_rmsnorm reads a layer's output and the residual stream and writes their sum and its norm. A serving step's
# sampler (`joulecast.features.sampling`): fill writes alone; a radix sort pass reads its fp32 keys twice and int64
# values once (4 four-byte operands) and writes both (3). An attention mask added to the scores (mask_add) is read
# again for every head, from DRAM once its (seq, seq) plane outgrows L2 (the A10's 6 MB at 2,048 tokens): counted in
# full, as an add of two tensors.
INPUTS = {"pointwise_add": 2, "pointwise_mul": 2, "unspecified_tensor": 2, "adamw": 4, "sgd_momentum": 3, "maxpool": 4,
          "mask_add": 2,
          "swiglu": 2, "add_rmsnorm": 2, "fill": 0, "radix_pass": 4}
OUTPUTS = {"adamw": 3, "sgd_momentum": 2, "avgpool": 0, "add_rmsnorm": 2, "radix_pass": 3}
FLOPS_PER_ELEMENT = {"gelu": 10, "tanh": 8, "silu": 6, "adamw": 12, "sgd_momentum": 4, "batchnorm": 2, "softmax": 5,
                     "layernorm": 8, "rmsnorm": 4, "add_rmsnorm": 5, "swiglu": 7, "rope": 3}
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
# Measured and not changed: the H200's own activation kernels (data/measurements, 16.8M and 268M bf16 elements) read
# physics time +28 / +39 % (tanh GELU) and +9 / +18 % (SiLU) at 1.5x, +1 / +9 % and -9 / -4 % at 1x. At 1x the
# H200's physics energy MAPE goes 10.4 -> 9.5 %, but the A100-PCIe's 11.2 -> 11.7 % (its rows already read physics
# fast) and leave-one-model-out (tree seeds 0 / 1) A10 4.67 / 4.59 -> 4.81 / 4.86 %, A100 4.86 / 4.98 -> 5.10 /
# 5.14 % (experiments/leave_one_model_out.py): the A100's rows, which set 1.5x, weigh more than two kernels.
TRANSCENDENTAL_INSTRUCTIONS_PER_ELEMENT = {"tanh": 36, "gelu": 36, "silu": 24, "sigmoid": 24, "swiglu": 24}
# ATen runs an elementwise op unvectorised (its unrolled loop: an element a load, an offset computed per operand) where
# an operand is broadcast with stride 0: a division by a 0-d tensor (GPT-2's scores), torch.where over a (seq, seq)
# mask, an attention mask added over every head. Measured on a lent H200 (data/measurements/h200/h200-masked and
# h200-eager; experiments/unvectorised_ops.py): those seven bf16 kernels of 25M-1,074M elements take 2.36-2.67 ps an
# element whatever their bytes (where reads a bool mask), a contiguous add 1.37 and a scaling by a Python float 0.94: an
# issue bound, not DRAM's. Their median, 0.632 SM cycles an element, is 81 FP32-lane slots (`traffic`'s unit) on
# Hopper's 128 lanes an SM and 40 on Ampere's 64. On EnergAIzer's A100-PCIe rows, which did not set it, physics time's
# mean signed error goes -4.3 -> -2.6 % at 900 MHz and -3.3 -> -1.1 % over the DVFS sweep, energy MAPE 10.3 -> 9.3 % and
# 10.2 -> 9.1 %; the A10's rows stay DRAM-bound (8.3 -> 8.4 %); the H200's eager passes 10.1 -> 8.4 % (each row read at
# its mean measured clock; in its setting as the model trains on it, the capped ones from the cap, as
# `experiments/physics_baseline.py`'s `evaluate` reads them since: the sweep 9.1 -> 8.1 %; the H200 on its collections'
# host dispatch 10.3 -> 7.9 %). Checked where it was not set (data/probes/h200/h200-masked-dtypes, measured after): fp16
# where and mask add within 4 % in time; fp32 where and division 27 and 14 % slower than physics, their unrolled loads
# reaching 2.4-2.9 TB/s, not the vectorised 4.4 (not modelled). Measured, not counted: the fp32 upcast (a contiguous
# cast) also runs 2.83 ps an element, and counted with the others takes physics on the A100-PCIe to 8.2 % (900 MHz) and
# 8.9 % (DVFS), but the residual's leave-one-model-out (tree seed 0) A100 4.96 -> 5.20 %. With the broadcast ops (3 tree
# seeds): A10 4.53 -> 4.51 %, A100 4.75 -> 4.90 %, over issue 31's 4.8 %, and on models none of whose kernels changed
# too (tree seed 0: ResNet 11.7 -> 13.5 %, ViT 5.8 -> 6.6 %, MobileViT 2.6 -> 2.9 %): the level the others' rows lend
# them moved nearer physics.
UNVECTORISED_OPS = ("scalar_div", "where", "mask_add")
UNVECTORISED_SM_CYCLES_PER_ELEMENT = 0.632
# A streaming op's backward as PyTorch's autograd runs it (tools/autograd/derivatives.yaml), where the lowering's op
# names one PyTorch op: op -> (kernels it launches a forward launch, operands each reads, operands each writes). An
# attention mask or a constant added needs no gradient and the other operand's passes through: no kernel. An add of
# two tensors passes its gradient through both ways; where the residual stream forks, autograd sums the two branches'
# gradients in one kernel (read 2, write 1). A copy, a cast or a division by a 0-d tensor: one kernel over the
# gradient (read 1, write 1). An activation, a softmax or a mask select: one kernel reading the gradient and the
# saved input or output (gelu_backward, threshold_backward, silu_backward, tanh_backward, _softmax_backward_data,
# where) and writing one; tanh's, 1 - y^2, without the forward's transcendental arithmetic. Any other op:
# BACKWARD_DEFAULT_LAUNCHES kernels, each reading one operand more than the forward (the gradient): the names that
# stand for several PyTorch ops (an eager RMSNorm's power, its weight's product, whose gradient takes a reduction of
# its own), products of two tensors, norms, pooling, lookups, cuDNN's layout transposes, fused kernels.
BACKWARD = {"mask_add": (0, 0, 0), "scalar_add": (0, 0, 0), "pointwise_add": (1, 2, 1), "copy": (1, 1, 1),
            "typecast_to_fp32": (1, 1, 1), "typecast_to_bf16": (1, 1, 1), "scalar_div": (1, 1, 1),
            "gelu": (1, 2, 1), "relu": (1, 2, 1), "silu": (1, 2, 1), "tanh": (1, 2, 1), "softmax": (1, 2, 1),
            "where": (1, 2, 1)}
BACKWARD_DEFAULT_LAUNCHES = 2
_PLAIN_BACKWARD = ("tanh",)  # backward without the forward's transcendental arithmetic


def backward_of(op: str) -> tuple[int, int, int]:
    """(kernels autograd launches for the backward of one launch of streaming op `op`, operands each reads,
    operands each writes): `BACKWARD`'s entry, else BACKWARD_DEFAULT_LAUNCHES kernels reading the gradient beside
    the forward's operands."""
    return BACKWARD.get(op, (BACKWARD_DEFAULT_LAUNCHES, INPUTS.get(op, 1) + 1, OUTPUTS.get(op, 1)))


_CTAS = {"elements": 0, "rows": 1, "softmax": 2}


# Each row's kind's parameters (`kinds.Streaming`), as columns of one table: the elements it moves ("cols" or rows x
# cols), its CTA rule (`_CTAS`), whether it reduces, its instructions an element, whether its ops are
# transcendental, its fixed FLOPs an element (NaN: by op) and its instructions an element where it runs a CTA a row
# (its instructions an element where the kind gives none); 0 (NaN) for a kind without streaming parameters.
_FLAT, _CTA_RULE, _REDUCTION, _INSTRUCTIONS, _TRANSCENDENTAL, _FIXED_FLOPS, _ROW_BLOCK_INSTRUCTIONS = range(7)
_BY_KIND: dict[tuple[str, ...], tuple[Mapping[str, Any], np.ndarray]] = {}  # kind names -> (registry, table)


def _kind_row(kind: Any) -> list[float]:
    p = kind.streaming if kind is not None else None
    if p is None:
        return [0.0, 0.0, 0.0, 0.0, 0.0, np.nan, np.nan]
    block = p.row_block_instructions_per_element
    return [float(p.elements == "cols"), float(_CTAS[p.ctas]), float(p.reduction), float(p.instructions_per_element),
            float(p.transcendental), np.nan if p.flops_per_element is None else float(p.flops_per_element),
            float(p.instructions_per_element if block is None else block)]


def _by_kind(kind: Any) -> np.ndarray:
    """(rows, parameters) each row's kind's streaming parameters: a table per set of kind names, built once for the
    registry (again when a kind is added), read by the rows' codes."""
    names = tuple(kind.names.tolist())
    cached = _BY_KIND.get(names)
    if cached is None or cached[0] is not kinds.REGISTRY:
        table = np.array([_kind_row(kinds.REGISTRY.get(n)) for n in names] or [_kind_row(None)])
        cached = _BY_KIND[names] = (kinds.REGISTRY, table)
    return cached[1][kind.codes]


@functools.lru_cache(maxsize=256)
def _op_table(ops: tuple[str, ...]) -> np.ndarray:
    """(ops, 5) per op name: operands read, written, FLOPs an element, transcendental instructions an element and
    whether ATen runs it unvectorised (`UNVECTORISED_OPS`); a backward op reads and writes as `backward_of` says and
    shares its forward op's other entries."""
    rows = []
    for op in ops or ("",):
        forward = op.removesuffix("_bwd")
        reads, writes = INPUTS.get(forward, 1), OUTPUTS.get(forward, 1)
        transcendental = TRANSCENDENTAL_INSTRUCTIONS_PER_ELEMENT.get(forward, 0)
        if op.endswith("_bwd"):
            reads, writes = backward_of(forward)[1:]
            transcendental = 0 if forward in _PLAIN_BACKWARD else transcendental
        rows.append([reads, writes, FLOPS_PER_ELEMENT.get(forward, 1), transcendental,
                     float(forward in UNVECTORISED_OPS)])
    return np.array(rows, dtype=float)


def _elements(k: Columns, params: np.ndarray) -> np.ndarray:
    """Elements a streaming row moves (its kind's parameters, `_by_kind`): its `cols` for a flat kernel, `rows x
    cols` for one over rows."""
    return np.where(params[:, _FLAT] > 0, k["cols"], k["rows"] * k["cols"])


def _too_wide(k: Columns) -> np.ndarray:
    """Per row: a softmax row too wide for ATen's persistent kernel, which runs a CTA a row instead."""
    return k["cols"] > arch.SOFTMAX_PERSISTENT_MAX_COLS


def tiles(k: Columns, traits: arch.ArchTraits) -> dict[str, np.ndarray]:
    """Grids (PyTorch ATen launch shapes, see `arch`): elementwise and embedding kernels 512 elements a CTA, norms
    a CTA a row, the persistent softmax 4 rows a CTA up to 1,024 columns and a row a CTA above."""
    params = _by_kind(k["kind"])
    moved = _elements(k, params)
    rule = params[:, _CTA_RULE]
    softmax = np.where(_too_wide(k), k["rows"], ceil_div(k["rows"], arch.SOFTMAX_ROWS_PER_CTA))
    n = np.where(rule == _CTAS["softmax"], softmax,
                 np.where(rule == _CTAS["rows"], k["rows"], ceil_div(moved, arch.ELEMENTWISE_ELEMENTS_PER_CTA)))
    per_sm = traits.threads_per_sm // arch.STREAMING_THREADS_PER_CTA
    ones = np.ones_like(n)
    return dict(tile_m=ones, tile_n=np.minimum(moved, arch.ELEMENTWISE_ELEMENTS_PER_CTA), tile_k=ones,
                ctas_per_sm=ones * per_sm, split_k=ones, tiles=np.maximum(n, 1), k_iters=ones)


def traffic(k: Columns, b_in: np.ndarray, b_out: np.ndarray, l2_bytes: float, lanes_per_sm: float
            ) -> dict[str, np.ndarray]:
    """Inputs small enough to stay in L2 after their producer wrote them are read from L2, not DRAM; outputs are
    written back to DRAM. An unvectorised op issues its SM cycles an element on the GPU's `lanes_per_sm` FP32
    lanes."""
    params, ops = _by_kind(k["kind"]), k["op"]
    by_op = _op_table(tuple(ops.names.tolist()))[ops.codes]
    moved = _elements(k, params).astype(float)
    read, write = moved * by_op[:, 0] * b_in, moved * by_op[:, 1] * b_out
    dram = np.where(read <= arch.L2_USABLE_FRACTION * l2_bytes, 0.0, read) + write
    fixed = params[:, _FIXED_FLOPS]
    flops = moved * np.where(np.isnan(fixed), by_op[:, 2], fixed)
    reductions = params[:, _REDUCTION] > 0
    # exec_flops counts 2 per lane-instruction, as the FP32 peak does (an FMA is 2 FLOPs)
    transcendental = np.where(params[:, _TRANSCENDENTAL] > 0, by_op[:, 3], 0.0)
    # a softmax too wide for the persistent kernel runs a CTA a row, at its kind's cost for that kernel
    row_block = (params[:, _CTA_RULE] == _CTAS["softmax"]) & _too_wide(k)
    instructions = np.where(row_block, params[:, _ROW_BLOCK_INSTRUCTIONS], params[:, _INSTRUCTIONS])
    issued = 2.0 * moved * (instructions + transcendental)
    # the unrolled loop's slots beyond the vectorised kernel's: time, but no arithmetic (no FMA power)
    unrolled = UNVECTORISED_SM_CYCLES_PER_ELEMENT * lanes_per_sm
    stalled = np.where(by_op[:, 4] > 0, 2.0 * moved * np.maximum(unrolled - instructions, 0.0), 0.0)
    return dict(flops=flops, exec_flops=np.maximum(flops, issued + stalled), stall_flops=stalled, dram_bytes=dram,
                l2_bytes=read + write, smem_bytes=np.where(reductions, read, 0.0))
