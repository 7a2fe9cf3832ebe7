"""The physics estimate: kernel table -> analytical features -> per-kernel time and power -> workload energy.

Everything is column arithmetic over all kernels at once; several workloads can be evaluated in one pass by
giving the kernel table a `workload_id` column (`joulecast.data.kernels.stack`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.gpus import GpuSpec
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kept import kept_for
from joulecast.data.kernels import BACKWARD_SUFFIXES, DTYPE_BYTES, DTYPES, STRING_COLUMNS, as_columns
from joulecast.data.labels import Labels, plain
from joulecast.features import arch, kinds, tiles
from joulecast.features.kinds import attention, conv2d, gemm, streaming
from joulecast.features.power import MIN_CLOCK_RATIO, idle_power_w, power_w

BOUNDS = ("compute", "dram", "l2", "latency")  # what bounds a kernel's time (the `bound` column's labels)
# Dtypes only tensor cores that do them can run: PyTorch's fp8 matmul needs compute capability 8.9 or newer, int8 GEMMs
# need int8 tensor cores (the GPU's `tensor_tflops` lists them where it has them).
HARDWARE_DTYPES = ("fp8", "int8")
_INT_COLUMNS = ("batch", "m", "n", "k", "rows", "cols", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                "conv_in_elements", "count")
# The power-cap clock solve tries _CAP_GRID clocks per stage: three stages resolve 1/4096 of the clock range (under
# 0.3 MHz, far under a 15 MHz DVFS step) in three vectorised passes instead of a bisection's twelve.
_CAP_GRID, _CAP_STAGES = 16, 3
_CAP_STEPS = np.linspace(0.0, 1.0, _CAP_GRID)
# Kernel rows up to which every rule computes the whole table (`_by_rule`).
_WHOLE_TABLE_ROWS = 256
# Kernels x grid clocks evaluated in one pass below which the whole grid beats bisection (five passes' call costs).
_CAP_GRID_AT_ONCE = 4096


@dataclass(frozen=True, slots=True)
class PhysicsTotals:
    """Per-workload totals (arrays indexed by workload id)."""

    time_s: np.ndarray
    energy_j: np.ndarray
    gpu_busy_s: np.ndarray
    host_s: np.ndarray              # host dispatch plus a serving engine's host work
    idle_gap_energy_j: np.ndarray
    engine_host_s: np.ndarray       # a serving engine's host work between passes alone (not work under the pass)
    host_dispatch_s: np.ndarray     # the host's time a kernel launch each workload took (0: CUDA graphs)
    # time and energy at the ends of `arch.HOST_DISPATCH_RANGE_S` (n x 2; the workload's own where it launches
    # through CUDA graphs): what an unstated host could make of them (`estimator.api.combine`)
    host_range_time_s: np.ndarray
    host_range_energy_j: np.ndarray
    # time and energy with a serving engine's host work at the ends of its measured rows' range (n x 2; the
    # workload's own without an engine or a range): the spread `estimator.api.combine` adds to every such estimate
    engine_range_time_s: np.ndarray
    engine_range_energy_j: np.ndarray

    @property
    def power_w(self) -> np.ndarray:
        return self.energy_j / self.time_s


def _static_features(kernels: Mapping[str, np.ndarray], gpu: GpuSpec) -> dict[str, np.ndarray]:
    """Clock-independent features: tiles, waves, FLOPs, bytes."""
    k = dict(kernels)
    for c in _INT_COLUMNS:
        if k[c].dtype != np.int64:  # a built table's already are: no call for each
            k[c] = k[c].astype(np.int64)
    for c in STRING_COLUMNS:  # compared and looked up as codes, not as Python strings
        k[c] = Labels.of(k[c])
    s = _structure(k, gpu)
    k["count"] = _without_idle_transposes(k, gpu)
    traits = arch.traits(gpu.architecture)
    b_in, is_gemm, is_attn, on_tensor, rule_rows = s["b_in"], s["is_gemm"], s["is_attn"], s["on_tensor"], s["rules"]
    k["tensor_core"] = s["tensor_core"].copy()  # the features' own: a caller may write into them
    columns = {**k, "b_in": b_in, "b_out": s["b_out"], "implicit": s["implicit"]}
    t = _by_rule(rule_rows, columns, (lambda r: gemm.tiles(r, traits, gpu.sm_count, r["b_in"]),
                                      lambda r: attention.tiles(r, traits, gpu.sm_count),
                                      lambda r: streaming.tiles(r, traits)), s["which"])
    t["waves"], t["last_wave_occupancy"] = tiles.waves(t["tiles"], t["ctas_per_sm"], gpu.sm_count)
    moved = _by_rule(rule_rows, {**columns, **t}, (
        lambda r: gemm.traffic(r, r, r["b_in"], r["b_out"], gpu.l2_bytes, r["implicit"], gpu.sm_count,
                               traits.tc_cluster),
        lambda r: attention.traffic(r, r, r["b_in"]),
        lambda r: streaming.traffic(r, r["b_in"], r["b_out"], gpu.l2_bytes, _fp32_lanes_per_sm(gpu))), s["which"])
    winograd = conv2d.winograd(k, on_tensor)  # fewer multiplies issued: the same utilisation, less time
    if winograd.any():
        moved["exec_flops"] = np.where(winograd, moved["exec_flops"] / arch.WINOGRAD_MULTIPLY_REDUCTION,
                                       moved["exec_flops"])
    gemm_efficiency, misaligned = gemm.efficiency(k, t, b_in, on_tensor, gpu.tensor_gemm_efficiency)
    if "bf16" not in gpu.tensor_tflops:  # no bf16 hardware: converted to fp32 on the CUDA cores
        gemm_efficiency = np.where(k["dtype"] == "bf16", gemm_efficiency * arch.EMULATED_BF16_GEMM_RATE,
                                   gemm_efficiency)
    efficiency = np.where(is_attn, attention.efficiency(k, t), np.where(is_gemm, gemm_efficiency, 1.0))
    return dict(k, **t, **moved, on_tensor=on_tensor, misaligned=misaligned, peak_flops_ref=s["peak_flops_ref"],
                peak_clock_ref=s["peak_clock_ref"], cuda_flops_ref=s["cuda_flops_ref"], efficiency=efficiency,
                b_in=b_in, **_clock_free(t["tiles"], moved["exec_flops"], moved["stall_flops"], on_tensor, gpu))


def _without_idle_transposes(k: Mapping[str, Any], gpu: GpuSpec) -> np.ndarray:
    """Each row's launches, none for cuDNN's layout transposes where the GPU has no tensor cores for their
    convolution's dtype (fp32 storage multiplies in TF32): its CUDA-core kernels read NCHW
    (`arch.LAYOUT_TRANSPOSE_OPS`)."""
    transposes = k["op"].isin(arch.LAYOUT_TRANSPOSE_OPS)
    if not transposes.any():
        return k["count"]
    tensor = {d: float(("tf32" if d == "fp32" else d) in gpu.tensor_tflops) for d in DTYPE_BYTES}
    return np.where(transposes & (k["dtype"].lookup(tensor, 0.0) == 0), 0, k["count"])


def _cuda_core_fp32_tflops(gpu: GpuSpec) -> float:
    """The FP32 rate of CUDA-core work: the catalog's peak, halved on dual-FP32 parts (GA10x counts a shared
    FP32/INT32 datapath in it)."""
    dual = gpu.compute_capability in arch.DUAL_FP32_COMPUTE_CAPABILITIES
    return gpu.cuda_tflops["fp32"] * arch.DUAL_FP32_FRACTION if dual else gpu.cuda_tflops["fp32"]


def _fp32_lanes_per_sm(gpu: GpuSpec) -> float:
    """FP32 lanes an SM as physics counts CUDA-core work: that rate over SMs x 2 x the boost clock (64 on Ampere's
    A100 and, halved, the A10; 128 on Hopper)."""
    return _cuda_core_fp32_tflops(gpu) * 1e12 / (2.0 * gpu.sm_count * gpu.boost_clock_mhz * 1e6)


def _structure(k: Mapping[str, Any], gpu: GpuSpec) -> dict[str, Any]:
    """What a kernel table's kinds, ops, dtypes and tensor-core flags give on a GPU, whatever the sizes: operand
    widths, each kernel's rule, tensor cores and peaks. Kept for a table whose string columns share their names
    with the last ones' (a catalog model's workloads, made from one template, at any size): a key of those names
    and every row's codes and flags, the kept arrays read-only (one estimate: about 25 calls fewer). Only tables of
    one estimate's size are kept: a batch's would hold its arrays' memory for nothing."""
    labels = [k[c] for c in STRING_COLUMNS]
    if len(labels[0]) > _WHOLE_TABLE_ROWS:  # a batch's table: neither kept nor looked up
        return _made_structure(k, gpu)
    return kept_for(_STRUCTURES, (gpu, *(v.names for v in labels)), lambda: _made_structure(k, gpu), 64,
                    content=(*(v.codes.tobytes() for v in labels), np.asarray(k["tensor_core"]).tobytes()))


def _made_structure(k: Mapping[str, Any], gpu: GpuSpec) -> dict[str, Any]:
    """`_structure`, computed."""
    check_dtypes(gpu, k["dtype"])
    kind = k["kind"]
    rule = kinds.per_kind(kind, lambda kk: kinds.RULES.index(kk.rule), -1, key="rule")  # one lookup for both
    is_gemm, is_attn = rule == kinds.RULES.index("gemm"), rule == kinds.RULES.index("attention")
    # Tensor cores need a dtype the GPU has tensor peaks for (no bf16 on Volta): otherwise the CUDA-core path.
    tc_peak = k["dtype"].lookup(gpu.tensor_tflops, 0.0)
    tensor_core = np.asarray(k["tensor_core"]).astype(bool) & (tc_peak > 0)
    on_tensor = (is_gemm | is_attn) & tensor_core
    fp32 = np.where(~on_tensor & ~is_attn, _cuda_core_fp32_tflops(gpu), gpu.cuda_tflops["fp32"])  # CUDA-core work
    cuda_peak = np.where(k["dtype"] == "fp64", gpu.cuda_tflops.get("fp64", gpu.cuda_tflops["fp32"] / 64), fp32)
    out = dict(b_in=k["dtype"].lookup(DTYPE_BYTES, 2.0), b_out=k["acc_dtype"].lookup(DTYPE_BYTES, 2.0),
               is_gemm=is_gemm, is_attn=is_attn, tensor_core=tensor_core, on_tensor=on_tensor,
               implicit=kinds.per_kind(kind, lambda kk: kk.implicit_input, key="implicit_input") > 0,
               peak_flops_ref=np.where(on_tensor, tc_peak, cuda_peak) * 1e12,
               peak_clock_ref=np.where(on_tensor, gpu.tensor_peak_clock_mhz, gpu.boost_clock_mhz),
               cuda_flops_ref=cuda_peak * 1e12)
    for v in out.values():
        v.flags.writeable = False  # kept for later tables: nothing may write into them
    # each rule on its own rows: a GEMM's tiles and traffic on the GEMM rows, and so on (the streaming rule on the
    # rest); each row's rule and row number, to pick a small table's values from every rule's
    out["rules"] = (is_gemm, is_attn, ~(is_gemm | is_attn))
    out["which"] = (np.where(is_gemm, 0, np.where(is_attn, 1, 2)), np.arange(len(is_gemm)))
    for v in (out["rules"][2], *out["which"]):
        v.flags.writeable = False
    return out


_STRUCTURES: dict = {}  # the last few small tables' structures, by GPU, names, codes and flags (`_structure`)
_HOST_RANGE = np.array(arch.HOST_DISPATCH_RANGE_S)  # `PhysicsTotals.host_range_time_s`'s ends


def _clock_free(tiles_: np.ndarray, exec_flops: np.ndarray, stall_flops: np.ndarray, on_tensor: np.ndarray,
                gpu: GpuSpec) -> dict[str, np.ndarray]:
    """The parts of `_timeline_and_power` that no clock changes, computed once an estimate instead of at each of
    its clock solve's grids (the same operations in the same order: the same bits). Quantised per SM, not per wave:
    CTAs sharing an SM share its throughput, and one left alone in a partial wave gets all of it, so the busiest
    SM's tile count sets the time (256 tiles on 108 SMs cost 3 tile-times, not the 2 waves x 2 CTAs = 4 of a wave
    count)."""
    per_tile_flops = exec_flops / np.maximum(tiles_, 1)
    active_sm_fraction = np.minimum(1.0, tiles_ / gpu.sm_count)
    dram_share = np.minimum(1.0, active_sm_fraction / arch.DRAM_SATURATING_SM_FRACTION)
    return dict(busiest_sm_flops=np.ceil(tiles_ / gpu.sm_count) * gpu.sm_count * per_tile_flops,
                active_sm_fraction=active_sm_fraction,
                dram_rate=gpu.memory_bandwidth_bps * arch.DRAM_EFFICIENCY * dram_share,
                tensor_flops=np.where(on_tensor, exec_flops, 0.0),
                fma_flops=np.where(on_tensor, 0.0, exec_flops - stall_flops))  # stalled slots: no arithmetic


def _by_rule(rule_rows: Sequence[np.ndarray], columns: Mapping[str, Any],
             rules: Sequence[Callable[[Mapping[str, Any]], dict[str, np.ndarray]]],
             which: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
    """Each rule's columns for its rows (the row masks partition the table; `which`: each row's rule and its row
    number), put together; each column of the dtype all the rules' results share. A few rows (one estimate's) are
    computed whole by every rule and each row's value picked from its rule's (one gather a column, a third of the
    cost of two np.where), which costs fewer calls than indexing every column a rule reads; many (a batch's) by
    each rule on its own rows, which costs less arithmetic (estimate_many's physics 34,400 -> 38,700-39,300 per
    CPU-second)."""
    size = len(rule_rows[0])
    if size <= _WHOLE_TABLE_ROWS:
        parts = [rule(columns) for rule in rules]
        return {name: np.array([values[name] for values in parts])[which] for name in parts[-1]}
    rule_rows = [np.flatnonzero(rows) for rows in rule_rows]  # gathered by index: cheaper than a mask each column
    parts = [(rows, rule(_Rows(columns, rows))) for rows, rule in zip(rule_rows, rules)]
    out = {}
    for name in parts[0][1]:
        column = np.empty(size, np.result_type(*(values[name] for _, values in parts)))
        for rows, values in parts:
            column[rows] = values[name]
        out[name] = column
    return out


class _Rows(Mapping):
    """Some rows (their indices) of a table's columns, each column gathered when first read."""

    def __init__(self, columns: Mapping[str, Any], rows: np.ndarray):
        self._columns, self._rows, self._read = columns, rows, {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._read:
            v = self._columns[name]
            self._read[name] = (Labels(v.codes.take(self._rows), v.names) if isinstance(v, Labels)
                                else np.take(v, self._rows))
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)


def _timeline_and_power(f: dict[str, np.ndarray], gpu: GpuSpec, clock_mhz: np.ndarray,
                        power_only: bool = False) -> dict[str, np.ndarray]:
    """Per-kernel time (s) and power (W) at the given SM clock per row (`clock_mhz` may add a leading axis of
    candidate clocks, which broadcasts)."""
    traits = arch.traits(gpu.architecture)
    peak = f["peak_flops_ref"] * clock_mhz / f["peak_clock_ref"]
    t_compute = f["busiest_sm_flops"] / (peak * f["efficiency"])  # `_clock_free`
    clock_share = np.minimum(1.0, clock_mhz / (arch.DRAM_SATURATING_CLOCK_RATIO * gpu.boost_clock_mhz))
    t_dram = f["dram_bytes"] / (f["dram_rate"] * clock_share)
    l2_bandwidth = traits.l2_bytes_per_clock * clock_mhz * 1e6
    t_l2 = f["l2_bytes"] / (l2_bandwidth * arch.L2_EFFICIENCY)
    body = np.maximum(np.maximum(t_compute, t_dram), np.maximum(t_l2, arch.KERNEL_MIN_S))
    time = body + arch.LAUNCH_GAP_S
    cuda_peak = f["cuda_flops_ref"] * clock_mhz / gpu.boost_clock_mhz
    u_tensor = f["tensor_flops"] / (time * peak)  # 0 off the tensor cores
    u_fma = f["fma_flops"] / (time * cuda_peak)    # 0 on them
    u_l2 = f["l2_bytes"] / (time * l2_bandwidth)
    u_dram = f["dram_bytes"] / (time * gpu.memory_bandwidth_bps)
    u_sm = body / time * f["active_sm_fraction"]
    power = power_w(gpu, clock_mhz, u_tensor, u_fma, u_l2, u_sm, f["dram_bytes"] / time)
    if power_only:
        return {"power_w": power}
    # codes into BOUNDS (np.where in turn: np.select's values at a third of its cost on one workload's rows)
    bound = np.where(body <= arch.KERNEL_MIN_S, 3, np.where(t_compute >= np.maximum(t_dram, t_l2), 0,
                                                            np.where(t_dram >= t_l2, 1, 2)))
    bound = Labels(bound, BOUNDS)
    return dict(t_compute_s=t_compute, t_dram_s=t_dram, t_l2_s=t_l2, time_s=time, u_tensor=u_tensor, u_fma=u_fma,
                u_l2=u_l2, u_dram=u_dram, u_sm=u_sm, power_w=power, bound=bound)


# The static features `_timeline_and_power` reads.
_TIMELINE_INPUTS = ("peak_flops_ref", "peak_clock_ref", "busiest_sm_flops", "efficiency", "dram_bytes", "dram_rate",
                    "l2_bytes", "cuda_flops_ref", "tensor_flops", "fma_flops", "active_sm_fraction")


def _solve_power_cap(f: dict[str, np.ndarray], gpu: GpuSpec, clock: np.ndarray, over: np.ndarray,
                     cap: float | np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
    """Lower each over-limit kernel's clock (`over`) until its power meets its cap (`cap`, W: one for every kernel,
    or one an over-limit kernel; the limit, or more where its pass's idle gaps leave headroom), as the GPU's power
    capping does: (every kernel's clock, the over-limit kernels' `_timeline_and_power` at theirs, or None where not
    kept).

    Power rises with the clock, so the highest fitting clock is found on a grid of candidates per kernel, then on a
    finer grid between the last that fits and the first that does not. Where the last grid is evaluated whole (a
    few kernels: one estimate's), it is evaluated in full, and each kernel's timeline at the clock it keeps is read
    from it: that clock is its grid point's value to the bit, so no further pass over the table is needed.
    """
    sub = {name: f[name][over] for name in _TIMELINE_INPUTS}
    low = np.full(int(over.sum()), MIN_CLOCK_RATIO * gpu.boost_clock_mhz)
    high = clock[over].copy()
    kept = None
    for stage in range(_CAP_STAGES):
        full = stage == _CAP_STAGES - 1 and len(low) * _CAP_GRID <= _CAP_GRID_AT_ONCE
        fitting, grid_dyn = _fitting_clocks(sub, gpu, low, high, _CAP_STEPS, cap, full=full)
        last = np.maximum(fitting - 1, 0)  # none fits: the lowest clock, as the GPU would go no lower
        low, high = (low + (high - low) * _CAP_STEPS[last],
                     low + (high - low) * _CAP_STEPS[np.minimum(last + 1, _CAP_GRID - 1)])
        if grid_dyn is not None:
            kernels = np.arange(len(last))
            kept = {name: (Labels(v.codes[last, kernels], v.names) if isinstance(v, Labels) else v[last, kernels])
                    for name, v in grid_dyn.items()}
    clock = clock.copy()
    clock[over] = low
    return clock, kept


def _fitting_clocks(sub: dict[str, np.ndarray], gpu: GpuSpec, low: np.ndarray, high: np.ndarray, steps: np.ndarray,
                    cap: float | np.ndarray, full: bool = False
                    ) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
    """Per kernel, how many clocks of its grid (`low + (high - low) * steps`) fit its cap (W), and, where the
    whole grid was evaluated and `full` asks, its whole timeline (grid clocks x kernels; else None). Power rises
    with the clock near any limit a GPU allows (one above its idle at the maximum clock; a measured idle table may
    dip, the H100's by at most 0.18 W a 15 MHz step, near idle, at 360-510 MHz), so the fitting clocks are the
    grid's first (a test checks it on every catalog GPU with a table or without): a few kernels (one estimate's)
    evaluate the whole grid in one pass, many (a batch's) bisect, five passes at one clock a kernel, a third of the
    arithmetic, for the same counts."""
    if len(low) * len(steps) <= _CAP_GRID_AT_ONCE:
        grid = low + (high - low) * steps[:, None]
        dyn = _timeline_and_power(sub, gpu, grid, power_only=not full)
        return (dyn["power_w"] <= cap).sum(axis=0), dyn if full else None
    fitting, beyond = np.zeros(len(low), np.intp), np.full(len(low), len(steps), np.intp)
    while (open_ := fitting < beyond).any():
        middle = np.minimum((fitting + beyond) // 2, len(steps) - 1)  # fitting <= middle < beyond where open
        fits = _timeline_and_power(sub, gpu, low + (high - low) * steps[middle], power_only=True)["power_w"] <= cap
        fitting, beyond = np.where(open_ & fits, middle + 1, fitting), np.where(open_ & ~fits, middle, beyond)
    return fitting, None


def _l2_resident_share(f: Mapping[str, np.ndarray], count: np.ndarray, wid: np.ndarray, n: int, gpu: GpuSpec
                       ) -> np.ndarray:
    """Per workload, the share of its DRAM traffic that L2 still holds from its last run. A workload is estimated
    as it runs again and again (every measurement's loop, every serving step), so one whose whole traffic fits in
    L2 finds it there: on the H200 (60 MB of L2) a 4,096 x 4,096 bf16 GEMV (34 MB) run in a loop draws 189 W and a
    14,336 x 4,096 one (117 MB) 567 W (data/measurements/h200/h200-first). All of it stays up to the usable share
    of L2 (`arch.L2_USABLE_FRACTION`) and none once it fills the whole L2, where a least-recently-used cache
    evicts each line before its next use; linear between (assumption)."""
    footprint = np.bincount(wid, count * f["dram_bytes"], minlength=n)
    usable = arch.L2_USABLE_FRACTION * gpu.l2_bytes
    return np.minimum(np.maximum((gpu.l2_bytes - footprint) / (gpu.l2_bytes - usable), 0.0), 1.0)


def _backward(op: str) -> str:
    """"backward" for a backward kernel's op name (`data.kernels.BACKWARD_SUFFIXES`), else the name."""
    return "backward" if op.endswith(BACKWARD_SUFFIXES) else op


def _per_workload(value: float | np.ndarray, n: int) -> np.ndarray:
    """A number per workload: an array of them as it is, one number for all broadcast."""
    value = np.asarray(value, dtype=float)
    return value if value.shape == (n,) else np.broadcast_to(value, (n,))


def _per_kernel(values: np.ndarray, wid: np.ndarray, n: int) -> float | np.ndarray:
    """Per-workload values spread to their kernels: one workload's (one estimate's) as a number, cheaper to compare
    and multiply than a gathered array."""
    return float(values[0]) if n == 1 else values[wid]


def _with_rows(column: np.ndarray | Labels, rows: np.ndarray, values: np.ndarray | Labels) -> np.ndarray | Labels:
    """A copy of a column (numbers, or `Labels` of the same names) with the masked rows set to `values`."""
    if isinstance(column, Labels):
        codes = column.codes.copy()
        codes[rows] = values.codes
        return Labels(codes, column.names)
    out = column.copy()
    out[rows] = values
    return out


def check_setting(gpu: GpuSpec, sm_clock_mhz: float | None, power_limit_w: float | None) -> tuple[float, float]:
    """(SM clock, power limit) with the GPU's defaults filled in, each checked against what the GPU allows."""
    # each message formatted only where its check fails (a warm estimate checks its setting twice)
    for name, value in (("sm_clock_mhz", sm_clock_mhz), ("power_limit_w", power_limit_w)):
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, (int, float, np.integer, np.floating))):
            raise InputError(name, f"must be a number, got {value!r}")
    clock = gpu.boost_clock_mhz if sm_clock_mhz is None else float(sm_clock_mhz)
    limit = gpu.power_limit_w if power_limit_w is None else float(power_limit_w)
    low = MIN_CLOCK_RATIO * gpu.boost_clock_mhz
    if not low <= clock <= gpu.boost_clock_mhz:
        raise InputError("sm_clock_mhz", f"must be between {low:.0f} and {gpu.boost_clock_mhz:.0f} MHz on "
                                         f"{gpu.name}, got {clock:g}")
    if not gpu.power_limit_allowed(limit):
        raise InputError("power_limit_w", f"must be {gpu.power_limit_text} on {gpu.name} (the range "
                                          f"the card takes; a what-if beyond it: a hypothetical GPU, "
                                          f"'{gpu.name}:power_limit_w*1.2'), got {limit:g}")
    return clock, limit


def what_if_base(gpu: GpuSpec, sm_clock_mhz: float | None, power_limit_w: float | None
                 ) -> tuple[GpuSpec, float | None, float | None] | None:
    """A hypothetical GPU's base (the catalog GPU it scales) at the same setting: the same SM clock and power limit
    (the what-if's defaults where none is given; None where that is the base's default), the configuration whose
    learned correction the what-if's estimate takes. None for a real GPU, and where the base cannot run that
    setting (a clock*1.2 what-if at its maximum clock, an A100-PCIe rated 400 W at 400): a correction learned under
    another clock or cap does not carry over (the A100-PCIe's at 250 W read Wilkins' generations on the 400 W
    A100-SXM4, one die, 9.1 -> 18.7 % in energy, `experiments/generation_jobs.py`)."""
    if gpu.what_if_of is None:
        return None
    base = lookup_gpu(gpu.what_if_of)
    clock = gpu.boost_clock_mhz if sm_clock_mhz is None else float(sm_clock_mhz)
    limit = gpu.power_limit_w if power_limit_w is None else float(power_limit_w)
    runs = MIN_CLOCK_RATIO * base.boost_clock_mhz <= clock <= base.boost_clock_mhz and base.power_limit_allowed(limit)
    if not runs:
        return None
    return (base, None if clock == base.boost_clock_mhz else clock,
            None if limit == base.power_limit_w else limit)


def check_dtypes(gpu: GpuSpec, dtypes: Labels) -> None:
    """A dtype the GPU has no hardware for (fp8 and int8 need tensor cores that do them) is an error naming the
    dtypes it runs."""
    for dtype in HARDWARE_DTYPES:
        if dtype in set(dtypes.names.tolist()) and dtype not in gpu.tensor_tflops:
            runs = [d for d in DTYPES if d not in HARDWARE_DTYPES or d in gpu.tensor_tflops]
            raise InputError("dtype", f"{dtype} needs {dtype} tensor cores, which {gpu.display_name} lacks; it runs "
                                      f"{', '.join(runs)}")


def analyze(kernels: pd.DataFrame | Mapping[str, np.ndarray], gpu: GpuSpec, *, sm_clock_mhz: float | None = None,
            power_limit_w: float | None = None, host_dispatch_s: float | np.ndarray = 0.0,
            serial_host_s: float | np.ndarray = 0.0, serial_overlaps: float | np.ndarray = 0.0,
            serial_power_over_idle: float | np.ndarray = 1.0, serial_host_range_s: np.ndarray | None = None
            ) -> tuple[pd.DataFrame, PhysicsTotals]:
    """`analyze_arrays` with the per-kernel features as a DataFrame."""
    columns, totals = analyze_arrays(kernels, gpu, sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w,
                                     host_dispatch_s=host_dispatch_s, serial_host_s=serial_host_s,
                                     serial_overlaps=serial_overlaps, serial_power_over_idle=serial_power_over_idle,
                                     serial_host_range_s=serial_host_range_s)
    return pd.DataFrame(plain(columns)), totals


def analyze_arrays(kernels: pd.DataFrame | Mapping[str, np.ndarray], gpu: GpuSpec, *, sm_clock_mhz: float | None = None,
                   power_limit_w: float | None = None, host_dispatch_s: float | np.ndarray = 0.0,
                   serial_host_s: float | np.ndarray = 0.0, serial_overlaps: float | np.ndarray = 0.0,
                   serial_power_over_idle: float | np.ndarray = 1.0, serial_host_range_s: np.ndarray | None = None
                   ) -> tuple[dict[str, np.ndarray], PhysicsTotals]:
    """Physics estimate of one or more workloads on one GPU.

    Args:
        kernels: a kernel table, optionally with an integer `workload_id` column (0..n-1).
        gpu: the GPU.
        sm_clock_mhz: locked SM clock; default the maximum (boost) clock.
        power_limit_w: power cap; default the GPU's default limit.
        host_dispatch_s: host time per kernel launch (per workload id when an array).
        serial_host_s: host time per pass that the GPU waits out (a serving engine's work between steps; per
            workload id when an array), at `serial_power_over_idle` times the GPU's idle power.
        serial_overlaps: where nonzero (per workload id when an array), that host work runs under the pass instead
            (an engine that schedules a step ahead): the GPU waits only for what it takes beyond the pass.
        serial_host_range_s: that host work at the ends of its measured range (n x 2, per workload id), for
            `PhysicsTotals.engine_range_time_s`; None: `serial_host_s` at both ends.

    Returns:
        (per-kernel feature columns, one row per kernel, with per-launch time_s, power_w, energy_j; per-workload
        totals).
    """
    clock0, limit = check_setting(gpu, sm_clock_mhz, power_limit_w)
    kernels = as_columns(kernels)
    f = _static_features(kernels, gpu)
    rows = len(f["count"])
    clock = np.full(rows, clock0)
    count = f["count"].astype(float)
    wid = f["workload_id"].astype(np.int64, copy=False) if "workload_id" in f else np.zeros(rows, np.int64)
    n = int(wid.max()) + 1
    f["dram_bytes"] = f["dram_bytes"] * (1 - _per_kernel(_l2_resident_share(f, count, wid, n, gpu), wid, n))
    dyn = _timeline_and_power(f, gpu, clock)
    dispatched = np.where(f["op"].isin(arch.LIBRARY_LAUNCHED_OPS), 0.0, count)
    # a training step (a workload with backward kernels) pays autograd's host time a launch, and its host and GPU
    # overlap nearer their maximum (`arch.TRAINING_DISPATCH_FACTOR`, `arch.TRAINING_OVERLAP_NORM`)
    training = np.bincount(wid, f["op"].lookup({"backward": 1.0}, 0.0, key=_backward), minlength=n) > 0
    per_launch = _per_workload(host_dispatch_s, n)  # the host's, as the estimate reports it
    factor = np.where(training, arch.TRAINING_DISPATCH_FACTOR, 1.0)
    host = np.bincount(wid, dispatched, minlength=n) * per_launch * factor
    norm = np.where(training, arch.TRAINING_OVERLAP_NORM, arch.OVERLAP_NORM)
    serial = _per_workload(serial_host_s, n)
    overlaps = _per_workload(serial_overlaps, n) > 0
    idle = float(idle_power_w(gpu, clock0))
    # the GPU's power while it waits on the engine, as a multiple of idle, held to the limit too (an engine's entry may
    # say up to 20x idle)
    wait_ratio = np.minimum(np.asarray(serial_power_over_idle, dtype=float), limit / idle)

    def engine_wait(overlapped: np.ndarray, host_work: np.ndarray = serial) -> np.ndarray:
        """Seconds the GPU waits on the engine's host work a pass: all of it between passes, or where it runs under
        the pass, what it takes beyond the pass (host-bound steps)."""
        return np.where(overlaps, np.maximum(host_work - overlapped, 0.0), host_work)

    # a workload of one kernel, launched again and again, is paced by whichever of the GPU and the host is slower
    # throughout: no partial overlap as between a layer's kernels (`arch.OVERLAP_NORM`)
    one_kernel = np.bincount(wid, minlength=n) == 1

    def gaps(time_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(busy seconds, busy and host time overlapped, the engine's wait, the idle gaps' energy) per workload."""
        busy = np.bincount(wid, count * time_s, minlength=n)
        overlapped = np.where(one_kernel, np.maximum(busy, host),
                              (busy ** norm + host ** norm) ** (1 / norm))
        wait = engine_wait(overlapped)
        return busy, overlapped, wait, idle * (overlapped - busy + wait * wait_ratio)

    busy, overlapped, wait, gap_energy = gaps(dyn["time_s"])
    # The limiter holds the board's power averaged over a window far longer than a kernel (the A100's 250 W card
    # draws 202-248 W on Wilkins' host-bound generations, as the 400 W card does: the idle gaps between its kernels
    # leave them headroom), so a pass's kernels may draw more than the limit by what its idle gaps leave under it;
    # a pass without gaps meets the limit kernel by kernel.
    headroom = np.maximum(limit, (limit * (overlapped + wait) - gap_energy) / np.maximum(busy, 1e-30))
    cap = _per_kernel(headroom, wid, n)
    over = dyn["power_w"] > cap
    if over.any():
        clock, kept = _solve_power_cap(f, gpu, clock, over, cap if n == 1 else cap[over])
        if kept is None:
            dyn = _timeline_and_power(f, gpu, clock)
        else:  # the over-limit kernels' timelines at their clocks, the others' as they were
            dyn = {name: _with_rows(v, over, kept[name]) for name, v in dyn.items()}
        busy, overlapped, wait, gap_energy = gaps(dyn["time_s"])
    dyn["power_w"] = np.minimum(dyn["power_w"], cap)
    time_s = overlapped + wait
    kernel_j = np.bincount(wid, count * dyn["power_w"] * dyn["time_s"], minlength=n)
    # A throttled kernel runs longer and shortens the gaps whose headroom it was given: what that leaves over the
    # limit comes off the kernels' power, as the limiter would take it (80 of the estimate reference's 2,500
    # configurations, at most 1.6 % over; taking the headroom again from the throttled timeline, a second clock
    # solve, left 6 at most 0.07 % over and cost a warm estimate a fifth more)
    shave = np.minimum(1.0, (limit * time_s - gap_energy) / np.maximum(kernel_j, 1e-30))
    if (shave < 1.0).any():
        dyn["power_w"] = dyn["power_w"] * _per_kernel(shave, wid, n)
        kernel_j = kernel_j * shave
    energy = dyn["power_w"] * dyn["time_s"]
    # the same timeline under another host: its launches dispatched at each end of the measured hosts' range, the
    # kernels as they are (the power cap's clock not solved again), the gaps it opens or closes at idle power
    # (both ends at once, n x 2: a dozen array operations, not two dozen)
    ranged = np.where(np.asarray(per_launch)[:, None] > 0,
                      np.bincount(wid, dispatched, minlength=n)[:, None] * _HOST_RANGE, host[:, None])
    spans = np.where(one_kernel[:, None], np.maximum(busy[:, None], ranged),
                     (busy[:, None] ** arch.OVERLAP_NORM + ranged ** arch.OVERLAP_NORM) ** (1 / arch.OVERLAP_NORM))
    energy_j = kernel_j + gap_energy
    # under another host the engine's wait moves with the pass where its host work runs under it
    span_wait = engine_wait(spans.T).T
    # the engine's host work at the ends of its measured range, the rest as it is (waits n x 2, transposed as above)
    ends = serial[:, None] if serial_host_range_s is None else np.broadcast_to(serial_host_range_s, (n, 2))
    end_wait = engine_wait(overlapped, ends.T).T
    totals = PhysicsTotals(time_s=time_s, energy_j=energy_j,
                           gpu_busy_s=busy, host_s=host + wait, idle_gap_energy_j=gap_energy,
                           engine_host_s=np.where(overlaps, 0.0, serial), host_dispatch_s=np.array(per_launch),
                           host_range_time_s=spans + span_wait,
                           host_range_energy_j=energy_j[:, None] + idle * (spans - overlapped[:, None]
                                                                           + (span_wait - wait[:, None])
                                                                           * _per_workload(wait_ratio, n)[:, None]),
                           engine_range_time_s=np.broadcast_to(overlapped[:, None] + end_wait, (n, 2)),
                           engine_range_energy_j=np.broadcast_to(energy_j[:, None] + idle * (end_wait - wait[:, None])
                                                                 * _per_workload(wait_ratio, n)[:, None], (n, 2)))
    features = {  # from the arrays already read: reading the table's columns again costs more than the maths
        **{c: f[c] for c in kernels},
        "tensor_core": f["tensor_core"], "misaligned": f["misaligned"],
        **{c: f[c] for c in ("tile_m", "tile_n", "tile_k", "tiles", "k_iters", "split_k", "ctas_per_sm", "waves",
                             "last_wave_occupancy", "flops", "exec_flops", "dram_bytes", "l2_bytes", "smem_bytes")},
        "intensity_flop_per_byte": f["flops"] / np.maximum(f["dram_bytes"], 1.0),
        "sm_clock_mhz": clock, **dyn, "energy_j": energy, "launches": f["count"],
    }
    return features, totals
