"""GEMMs (cuBLAS matmuls, linear layers, batched products), and the gemm rule: tiles, traffic and the rate a
tuned kernel reaches, for every GEMM-like row at once (convolutions use it too, `kinds.conv2d`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from joulecast.data.errors import InputError
from joulecast.features import arch
from joulecast.features.kinds import KernelKind, PlanOp
from joulecast.features.tiles import ceil_div

Columns = Mapping[str, Any]


def tiles(k: Columns, traits: arch.ArchTraits, sm_count: int, dtype_bytes: np.ndarray) -> dict[str, np.ndarray]:
    """CTA tile choice for GEMM-like kernels (gemm, conv2d), documented heuristic.

    - Tensor cores: the architecture's large tile (`ArchTraits.tc_tile`), the wider side along the larger of M and N;
      a side of 64 when that dimension is at most 64 (cuBLAS picks narrow tiles for skinny GEMMs). The K step holds
      the same bytes as 16-bit `tile_k` (so 2x for fp8/int8, 1/2 for tf32).
    - CUDA cores: `ArchTraits.simt_tile`; for 16-bit operands (bf16 on Volta) 64 along the output's narrower side
      at every size (`arch.SIMT_16BIT_NARROW_TILE`).
    - Split-K when the grid is smaller than one wave and K is long (cuBLAS does this for skinny GEMMs): K is split
      so that the grid fills up to one wave, keeping at least 4 K-steps per split. Not for 16-bit operands on the
      CUDA cores (bf16 on Volta): cuBLAS's kernels for those never split (`arch.SIMT_16BIT_SPLITS_K`).
    """
    m, n, kk, batch, tc = k["m"], k["n"], k["k"], k["batch"], k["tensor_core"]
    big, small, tk16 = traits.tc_tile[1], traits.tc_tile[0], traits.tc_tile[2]
    m_major = m >= n
    tile_m = np.where(tc, np.where(m_major, big, small), traits.simt_tile[0])
    tile_n = np.where(tc, np.where(m_major, small, big), traits.simt_tile[1])
    tile_m = np.where(m <= 64, np.minimum(tile_m, 64), np.where(m <= 128, np.minimum(tile_m, 128), tile_m))
    tile_n = np.where(n <= 64, np.minimum(tile_n, 64), np.where(n <= 128, np.minimum(tile_n, 128), tile_n))
    simt16 = ~tc & (dtype_bytes == 2) & (k["kind"] == "gemm")  # 16-bit GEMMs on the CUDA cores (cuDNN's convs apart)
    if arch.SIMT_16BIT_NARROW_TILE is not None:  # 64 along the narrower side
        tile_m = np.where(simt16 & ~m_major, np.minimum(tile_m, arch.SIMT_16BIT_NARROW_TILE), tile_m)
        tile_n = np.where(simt16 & m_major, np.minimum(tile_n, arch.SIMT_16BIT_NARROW_TILE), tile_n)
    tile_k = np.where(tc, np.maximum(8, (tk16 * 2) // dtype_bytes), traits.simt_tile[2])
    ctas_per_sm = np.where(tc, traits.tc_ctas_per_sm, traits.simt_ctas_per_sm)
    base_tiles = ceil_div(m, tile_m) * ceil_div(n, tile_n) * batch
    k_steps = ceil_div(kk, tile_k)
    slots = sm_count * ctas_per_sm
    split = np.maximum(np.minimum(slots // np.maximum(base_tiles, 1), k_steps // 4), 1)  # np.clip: 5x the call
    if not arch.SIMT_16BIT_SPLITS_K:
        split = np.where(simt16, 1, split)
    return dict(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, ctas_per_sm=ctas_per_sm, split_k=split,
                tiles=base_tiles * split, k_iters=ceil_div(k_steps, split))


def traffic(k: Columns, t: Columns, b_in: np.ndarray, b_out: np.ndarray, l2_bytes: float,
            implicit: np.ndarray, sm_count: int, cluster: int = 1) -> dict[str, np.ndarray]:
    """Operands are read once where either fits in L2 (held there while the other streams past). Otherwise the
    output is computed a wave of tiles at a time, whose tiles step along K together and share their rows of A and
    columns of B through L2 (a K-step's slice of them, not their whole K extent): each wave reads the rows and columns
    of the output block it covers (`_wave_block`), so A is read once a block column and B once a block row.
    `implicit` rows (implicit-GEMM convolutions) read their activations in place: im2col is never materialised.
    On an architecture whose tensor-core CTAs work in clusters of `cluster` (`ArchTraits.tc_cluster`), the CTAs of a
    cluster, side by side across the tile's narrow side, share the operand along its wide side: each loads its part
    of it from L2 (where the grid holds that many tiles across), and its own rows of the other.

    Before (to 2026-12-04), a GEMM whose operands both overflowed L2 read one of them in full once for each L2-sized
    chunk of the other, K extent and all, which a GEMM streaming a long K never needs to hold: a weight gradient over
    every token of a training step (BERT-base's 768 x 3,072 one over 72 x 384 tokens on the A40's 6 MB L2 read 9.3
    GB instead of 0.43) or the LM head's input gradient (101 GB instead of 4.2), which made physics' time per
    sequence rise with the batch (Zeus' A40 epochs, experiments/zeus_power_limits.py)."""
    m, n, kk, batch = (k[c].astype(float) for c in ("m", "n", "k", "batch"))
    a = np.where(implicit, k["conv_in_elements"] / batch, m * kk) * b_in
    b = kk * n * b_in
    c = m * n * b_out
    l2h = arch.L2_USABLE_FRACTION * l2_bytes
    m_block, n_block = _wave_block(m, n, t, sm_count)
    streamed = a * n / n_block + b * m / m_block  # the blocks are never empty (`_wave_block`)
    partials = np.where(t["split_k"] > 1, m * n * 4.0 * t["split_k"] * 2, 0.0)  # fp32 partial sums, written and read
    dram = batch * (np.where(np.minimum(a, b) <= l2h, a + b, streamed) + c + partials)
    k_padded = t["k_iters"] * t["tile_k"]
    # a tile over an edge loads only the rows and columns there are (TMA and cp.async skip the rest): a tile's rows
    # of A and columns of B on average, not the tile's sides
    across_m, across_n = np.maximum(np.ceil(m / t["tile_m"]), 1), np.maximum(np.ceil(n / t["tile_n"]), 1)
    rows, cols = m / across_m, n / across_n
    if cluster > 1:  # the wide side's operand split over the cluster's CTAs, as many as the narrow side has tiles
        wide_m = t["tile_m"] >= t["tile_n"]
        share = np.where(k["tensor_core"], np.minimum(cluster, np.where(wide_m, across_n, across_m) * batch), 1.0)
        rows, cols = np.where(wide_m, rows / share, rows), np.where(wide_m, cols, cols / share)
    loads = t["tiles"] * (rows + cols) * k_padded * b_in
    executed = 2.0 * t["tiles"] * t["tile_m"] * t["tile_n"] * k_padded
    return dict(flops=2.0 * m * n * kk * batch, exec_flops=executed, stall_flops=np.zeros_like(executed),
                dram_bytes=dram, l2_bytes=loads + batch * c, smem_bytes=2.0 * loads)


def _wave_block(m: np.ndarray, n: np.ndarray, t: Columns, sm_count: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the output block a wave of tiles covers: every SM's CTAs' tiles (a split-K tile a share
    of one), as square as the output's sides allow."""
    area = sm_count * t["ctas_per_sm"] * t["tile_m"] * t["tile_n"] / np.maximum(t["split_k"], 1)
    m, n = np.maximum(m, 1.0), np.maximum(n, 1.0)
    rows = np.minimum(m, np.maximum(np.sqrt(area), area / n))
    return rows, np.minimum(n, area / rows)


def efficiency(k: Columns, t: Columns, b_in: np.ndarray, on_tensor: np.ndarray,
               tensor_rate: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(fraction of peak, misaligned) per row: a long K reaches `arch.GEMM_EFFICIENCY` (on the tensor cores,
    `tensor_rate` where the GPU's chip has its own, `GpuSpec.tensor_gemm_efficiency`), a short one less (its
    pipeline's prologue and epilogue), and a tensor-core GEMM with a misaligned leading dimension a third."""
    k_iters = t["k_iters"].astype(float)  # a tile's pipeline prologue and epilogue cost a few K-steps of its own
    long_k = arch.GEMM_EFFICIENCY if tensor_rate is None else np.where(on_tensor, tensor_rate, arch.GEMM_EFFICIENCY)
    rate = long_k * k_iters / (k_iters + arch.GEMM_TILE_OVERHEAD_K_STEPS)
    # Leading dimensions: a linear layer's K (its other side is either its width, aligned in every model, or the
    # token count, which no operand strides by); a batched product's K or output width N, where the M x K or M x N
    # matrix they stride is no smaller than the aligned operand beside it (eager attention's scores and
    # probabilities over 197 tokens, not a decode step's single query row against the cached keys and values).
    align = arch.GEMM_ALIGN_BYTES // b_in.astype(np.int64)
    deep, wide = k["k"] % align != 0, k["n"] % align != 0
    batched = (deep & (k["m"] >= k["n"])) | (wide & (k["m"] >= k["k"]))
    misaligned = (k["kind"] == "gemm") & on_tensor & np.where(k["op"] == "bmm", batched, deep)
    return np.where(misaligned, rate * arch.MISALIGNED_GEMM_RATE, rate), misaligned


def _add(builder: Any, s: Mapping[str, Any]) -> None:
    builder._add(kind="gemm", op="matmul", batch=1, m=s["m"], n=s["n"], k=s["k"], **builder._gemm_dtypes())


def _run(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
    if dtype == "fp8":  # e4m3 inputs, bf16 output, unit scales, through torch._scaled_mm
        if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
            raise InputError("dtype", "fp8 GEMMs need a GPU with fp8 tensor cores (compute capability 8.9 or newer)")
        a = rand(s["m"], s["k"]).to(torch.float8_e4m3fn)
        b = rand(s["n"], s["k"]).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt's fp8 path requires
        one = torch.ones((), device=device, dtype=torch.float32)
        return (lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), (a, b, one)
    a, b = rand(s["m"], s["k"], dtype=dtype), rand(s["k"], s["n"], dtype=dtype)
    return (lambda: torch.matmul(a, b)), (a, b)


def _add_bmm(builder: Any, s: Mapping[str, Any]) -> None:
    builder.bmm(s["batch"], s["m"], s["n"], s["k"])


def _run_bmm(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
    """A strided batched product as eager attention runs it: torch.matmul of (batch, m, k) by (batch, k, n)."""
    a, b = rand(s["batch"], s["m"], s["k"], dtype=dtype), rand(s["batch"], s["k"], s["n"], dtype=dtype)
    return (lambda: torch.matmul(a, b)), (a, b)


KIND = KernelKind(name="gemm", order=0, sizes=("m", "n", "k", "batch"), rule="gemm",
                  plan_ops=(PlanOp("gemm", ("m", "n", "k"), _add, _run,
                                   dtypes=("fp32", "tf32", "bf16", "fp16", "fp8", "int8")),
                            PlanOp("bmm", ("batch", "m", "n", "k"), _add_bmm, _run_bmm)))
