"""Tiles, waves and residency of each kernel, vectorised over the kernel table.

A kernel is a grid of CTAs ("tiles"); the GPU runs `sm_count * ctas_per_sm` of them at once (a wave), so a kernel
takes `waves = ceil(tiles / slots)` waves and its last wave may be partly empty.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from joulecast.features.arch import (ELEMENTWISE_ELEMENTS_PER_CTA, SOFTMAX_PERSISTENT_MAX_COLS, SOFTMAX_ROWS_PER_CTA,
                                     STREAMING_THREADS_PER_CTA, ArchTraits)

Columns = Mapping[str, np.ndarray]


def _ceil_div(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    return -(-a // b)


def gemm_tiles(k: Columns, traits: ArchTraits, sm_count: int, dtype_bytes: np.ndarray) -> dict[str, np.ndarray]:
    """CTA tile choice for GEMM-like kernels (gemm, conv2d), documented heuristic.

    - Tensor cores: the architecture's large tile (`ArchTraits.tc_tile`), the wider side along the larger of M and N;
      a side of 64 when that dimension is at most 64 (cuBLAS picks narrow tiles for skinny GEMMs). The K step holds
      the same bytes as 16-bit `tile_k` (so 2x for fp8/int8, 1/2 for tf32).
    - CUDA cores: `ArchTraits.simt_tile`.
    - Split-K when the grid is smaller than one wave and K is long (cuBLAS does this for skinny GEMMs): K is split
      so that the grid fills up to one wave, keeping at least 4 K-steps per split.
    """
    m, n, kk, batch, tc = k["m"], k["n"], k["k"], k["batch"], k["tensor_core"]
    big, small, tk16 = traits.tc_tile[1], traits.tc_tile[0], traits.tc_tile[2]
    m_major = m >= n
    tile_m = np.where(tc, np.where(m_major, big, small), traits.simt_tile[0])
    tile_n = np.where(tc, np.where(m_major, small, big), traits.simt_tile[1])
    tile_m = np.where(m <= 64, np.minimum(tile_m, 64), np.where(m <= 128, np.minimum(tile_m, 128), tile_m))
    tile_n = np.where(n <= 64, np.minimum(tile_n, 64), np.where(n <= 128, np.minimum(tile_n, 128), tile_n))
    tile_k = np.where(tc, np.maximum(8, (tk16 * 2) // dtype_bytes), traits.simt_tile[2])
    ctas_per_sm = np.where(tc, traits.tc_ctas_per_sm, traits.simt_ctas_per_sm)
    base_tiles = _ceil_div(m, tile_m) * _ceil_div(n, tile_n) * batch
    k_steps = _ceil_div(kk, tile_k)
    slots = sm_count * ctas_per_sm
    split = np.clip(np.minimum(slots // np.maximum(base_tiles, 1), k_steps // 4), 1, None)
    return dict(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, ctas_per_sm=ctas_per_sm, split_k=split,
                tiles=base_tiles * split, k_iters=_ceil_div(k_steps, split))


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


def attention_tiles(k: Columns, traits: ArchTraits, sm_count: int) -> dict[str, np.ndarray]:
    """FlashAttention-2 grid: one CTA per (batch, head, 128 query rows); decode (<= 16 queries) splits the keys
    into 512-key chunks instead (flash-decoding), so a single query still fills the GPU (a grouped query's heads
    share one, `gqa_packed`)."""
    rows, heads = gqa_packed(k)
    seq_kv = np.maximum(k["seq_kv"], 1)
    q_blocks = _ceil_div(rows, 128)
    kv_split = np.where(rows <= 16, _ceil_div(seq_kv, 512), 1)
    tiles = k["batch"] * heads * q_blocks * kv_split
    ones = np.ones_like(tiles)
    return dict(tile_m=np.minimum(rows, 128), tile_n=np.full_like(tiles, 64), tile_k=k["head_dim"],
                ctas_per_sm=ones * traits.tc_ctas_per_sm, split_k=kv_split, tiles=tiles,
                k_iters=_ceil_div(_ceil_div(seq_kv, kv_split), 64))


def streaming_tiles(k: Columns, traits: ArchTraits) -> dict[str, np.ndarray]:
    """Elementwise, embedding, softmax and norm grids (PyTorch ATen launch shapes, see `arch`)."""
    kind = k["kind"]
    elements = np.where(kind == "elementwise", k["cols"], k["rows"] * k["cols"])
    tiles = np.where(
        kind == "softmax",
        np.where(k["cols"] <= SOFTMAX_PERSISTENT_MAX_COLS, _ceil_div(k["rows"], SOFTMAX_ROWS_PER_CTA), k["rows"]),
        np.where(kind == "norm", k["rows"], _ceil_div(elements, ELEMENTWISE_ELEMENTS_PER_CTA)),
    )
    per_sm = traits.threads_per_sm // STREAMING_THREADS_PER_CTA
    ones = np.ones_like(tiles)
    return dict(tile_m=ones, tile_n=np.minimum(elements, ELEMENTWISE_ELEMENTS_PER_CTA), tile_k=ones,
                ctas_per_sm=ones * per_sm, split_k=ones, tiles=np.maximum(tiles, 1), k_iters=ones)


def waves(tiles: np.ndarray, ctas_per_sm: np.ndarray, sm_count: int) -> tuple[np.ndarray, np.ndarray]:
    """(waves, occupancy of the last wave in (0, 1])."""
    slots = sm_count * ctas_per_sm
    w = _ceil_div(tiles, slots)
    last = (tiles - (w - 1) * slots) / slots
    return w, last
