import math

import numpy as np
import pytest

import joulecast
from joulecast.features import arch, physics
from joulecast.features.kernel_table import kernel_table


def _features(records, gpu):
    return physics.analyze(kernel_table(records), joulecast.gpu(gpu))[0]


def test_gemm_tiles_and_waves_by_hand_on_a100():
    # 128x128 tiles: 32 x 18 = 576 tiles; 108 SMs x 2 CTAs = 216 slots -> 3 waves, the last 2/3 full; K/32 = 24 steps.
    f = _features([dict(kind="gemm", m=4096, n=2304, k=768, tensor_core=True)], "a100").iloc[0]
    assert (f.tile_m, f.tile_n, f.tile_k, f.tiles, f.k_iters, f.waves) == (128, 128, 32, 576, 24, 3)
    assert f.last_wave_occupancy == pytest.approx(144 / 216)


def test_gemm_tiles_and_waves_by_hand_on_h100():
    # 256x128 tiles along the longer M: 16 x 18 = 288 tiles on 132 slots -> 3 waves, last 24/132; K step 64.
    f = _features([dict(kind="gemm", m=4096, n=2304, k=768, tensor_core=True)], "h100-sxm").iloc[0]
    assert (f.tile_m, f.tile_n, f.tile_k, f.tiles, f.k_iters, f.waves) == (256, 128, 64, 288, 12, 3)
    assert f.last_wave_occupancy == pytest.approx(24 / 132)


def test_blackwell_cta_pairs_share_the_wide_operand_from_l2():
    """A B200's tensor-core CTAs work in pairs (`ArchTraits.tc_cluster`), side by side along N: the two share the 256
    rows of A along their tile's wide side (the longer M), each loading half of them, and each loads its own 128
    columns of B; Hopper's CTAs load their whole tile. A grid with one tile across the narrow side has no partner."""
    big = dict(kind="gemm", m=4096, n=2304, k=768, tensor_core=True)
    b200, h100 = _features([big], "b200").iloc[0], _features([big], "h100-sxm").iloc[0]
    assert (b200.tile_m, b200.tile_n, b200.tiles) == (h100.tile_m, h100.tile_n, h100.tiles) == (256, 128, 288)
    output = 4096 * 2304 * 2
    assert h100.l2_bytes == 288 * (256 + 128) * 768 * 2 + output
    assert b200.l2_bytes == 288 * (256 / 2 + 128) * 768 * 2 + output
    skinny = dict(kind="gemm", m=4096, n=64, k=4096, tensor_core=True)  # 64 columns: one tile across N
    one = _features([skinny], "b200").iloc[0]
    assert one.l2_bytes == one.tiles * (4096 / 16 + 64) * one.k_iters * one.tile_k * 2 + 4096 * 64 * 2


def test_skinny_gemm_splits_k():
    # M=4096, N=8: 64-wide tiles, 32 tiles; 216 slots // 32 = 6 splits (K has 128 steps, >= 4 per split).
    f = _features([dict(kind="gemm", m=4096, n=8, k=4096, tensor_core=True)], "a100").iloc[0]
    assert (f.tile_n, f.split_k, f.tiles, f.k_iters) == (64, 6, 192, math.ceil(128 / 6))


def test_sixteen_bit_gemms_off_the_tensor_cores_never_split_k(monkeypatch):
    """bf16 on Volta runs on the CUDA cores (no bf16 tensor peak): 128x64 tiles over M=4096, N=40, 32 of them on
    the V100's 80 SMs, one K pass each. The same GEMM in fp32 there, and in bf16 on an A100's tensor cores, splits K
    to fill the grid; `arch.SIMT_16BIT_SPLITS_K` restores the split."""
    skinny = dict(kind="gemm", m=4096, n=40, k=4096, dtype="bf16", tensor_core=True)
    bf16 = _features([skinny], "v100-pcie-16gb").iloc[0]
    assert (bf16.tile_m, bf16.tile_n, bf16.split_k, bf16.tiles, bf16.k_iters) == (128, 64, 1, 32, 4096 / 8)
    fp32 = _features([dict(skinny, dtype="fp32", acc_dtype="fp32", tensor_core=False)], "v100-pcie-16gb").iloc[0]
    assert (fp32.split_k, fp32.tiles) == (5, 160)  # 160 slots // 32 tiles
    assert _features([skinny], "a100").iloc[0].split_k > 1
    monkeypatch.setattr(arch, "SIMT_16BIT_SPLITS_K", True)
    physics._STRUCTURES.clear()
    assert _features([skinny], "v100-pcie-16gb").iloc[0].split_k == 5
    physics._STRUCTURES.clear()  # none of these structures outlives the patch


@pytest.mark.parametrize("tokens, tiles", [(40, 32), (80, 64), (200, 128), (2080, 1056)])
def test_sixteen_bit_gemms_off_the_tensor_cores_keep_64_along_the_tokens(monkeypatch, tokens, tiles):
    """Their 128 x 64 tile holds past 64 tokens (`arch.SIMT_16BIT_NARROW_TILE`): at 80 tokens two tiles across N
    (64 CTAs), where the catalog's 128 x 128 took one at twice the work a CTA. fp32 on the CUDA cores keeps the
    catalog's tile; None restores it for bf16 too."""
    gemm = dict(kind="gemm", m=4096, n=tokens, k=4096, dtype="bf16", tensor_core=True)
    bf16 = _features([gemm], "v100-pcie-16gb").iloc[0]
    assert (bf16.tile_m, bf16.tile_n, bf16.tiles) == (128, 64, tiles)
    fp32 = _features([dict(gemm, dtype="fp32", acc_dtype="fp32", tensor_core=False)], "v100-pcie-16gb").iloc[0]
    assert fp32.tile_n == min(128, 64 if tokens <= 64 else 128)
    monkeypatch.setattr(arch, "SIMT_16BIT_NARROW_TILE", None)
    physics._STRUCTURES.clear()
    assert _features([gemm], "v100-pcie-16gb").iloc[0].tile_n == fp32.tile_n
    physics._STRUCTURES.clear()  # none of these structures outlives the patch


def test_streaming_grids_by_hand():
    f = _features([dict(kind="elementwise", op="relu", cols=2**20),
                   dict(kind="softmax", op="softmax", rows=1000, cols=512),
                   dict(kind="norm", op="layernorm", rows=300, cols=4096)], "a100")
    assert list(f.tiles) == [2048, 250, 300]           # 512 elements per CTA; 4 rows per CTA; a row per CTA
    assert list(f.waves) == [2, 1, 1]                  # 16 CTAs of 128 threads per SM -> 1728 slots


def _scalar_gemm_tiles(m, n, k, batch, traits, sms, dtype_bytes=2):
    """Readable reference of the tile heuristic, one GEMM at a time."""
    big, small, tk = traits.tc_tile[1], traits.tc_tile[0], traits.tc_tile[2]
    tm, tn = (big, small) if m >= n else (small, big)
    tm = min(tm, 64) if m <= 64 else (min(tm, 128) if m <= 128 else tm)
    tn = min(tn, 64) if n <= 64 else (min(tn, 128) if n <= 128 else tn)
    tile_k = max(8, tk * 2 // dtype_bytes)
    tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
    steps = math.ceil(k / tile_k)
    split = max(1, min(sms * traits.tc_ctas_per_sm // tiles, steps // 4))
    return tm, tn, tiles * split, math.ceil(steps / split)


@pytest.mark.parametrize("gpu", ["a100", "h100-sxm", "l4"])
def test_vectorised_tiles_equal_the_scalar_reference(gpu):
    rng = np.random.default_rng(0)
    shapes = rng.integers(1, 9000, size=(200, 3))
    batches = rng.choice([1, 1, 12, 96], size=200)
    records = [dict(kind="gemm", m=int(m), n=int(n), k=int(k), batch=int(b), tensor_core=True)
               for (m, n, k), b in zip(shapes, batches)]
    spec = joulecast.gpu(gpu)
    f = physics.analyze(kernel_table(records), spec)[0]
    traits = arch.traits(spec.architecture)
    for row in f.itertuples():
        assert (row.tile_m, row.tile_n, row.tiles, row.k_iters) == _scalar_gemm_tiles(
            row.m, row.n, row.k, row.batch, traits, spec.sm_count)


def test_a_grouped_query_decode_streams_each_key_and_value_once_per_key_value_head():
    decode = dict(kind="attention", op="flash", dtype="bf16", acc_dtype="bf16", tensor_core=True, batch=64,
                  head_dim=128, seq_q=1, seq_kv=8192, causal=False)
    gqa, mha = _features([dict(decode, heads=32, kv_heads=8), dict(decode, heads=8, kv_heads=8)], "h200").itertuples()
    # The 4 query heads of a group are one CTA's rows: 64 x 8 heads x 16 key chunks of 512, and the keys and values
    # cross L2 as often as with 8 heads alone (the queries and outputs, 4x as many, are the difference).
    assert (gqa.tiles, gqa.tile_m, mha.tile_m) == (64 * 8 * 16, 4, 1)
    assert gqa.l2_bytes - mha.l2_bytes == pytest.approx(2 * 64 * (32 - 8) * 128 * 2)
    assert gqa.dram_bytes - mha.dram_bytes == pytest.approx(2 * 64 * (32 - 8) * 128 * 2)
    # vLLM 0.5.4's own decode kernel keeps a block per query head; a workload served by it uses that kernel.
    paged = _features([dict(decode, op="paged", heads=32, kv_heads=8)], "h200").iloc[0]
    assert (paged.tiles, paged.tile_m) == (64 * 32 * 16, 1)
    served = joulecast.workload("llama-3-8b", phase="decode", batch=64, seq=8192, engine="vllm-0.5.4").kernels
    assert set(served.loc[served["kind"] == "attention", "op"]) == {"paged"}
    # Prefill keeps one CTA per query head (and 128-query block).
    prefill = _features([dict(decode, heads=32, kv_heads=8, seq_q=2048, seq_kv=2048, causal=True)], "h200").iloc[0]
    assert (prefill.tiles, prefill.tile_m) == (64 * 32 * 16, 128)
    # FlashAttention-2's split-KV kernel runs 64-row query tiles whatever the rows: a packed group's 4 query heads
    # execute 16x their work on the tensor cores, a lone query (no grouping) 64x; prefill pads to 16 rows only.
    assert gqa.exec_flops / gqa.flops == pytest.approx(16.0) and mha.exec_flops / mha.flops == pytest.approx(64.0)
    assert paged.exec_flops / paged.flops == pytest.approx(16.0)  # a serving engine's own kernel: 16-row MMAs
    assert prefill.exec_flops == pytest.approx(prefill.flops)
    # Unpacked, a query count off a multiple of 16 still pads to one: ViT's 197 tokens execute 208 rows' worth.
    vit = _features([dict(decode, heads=16, kv_heads=16, seq_q=197, seq_kv=197, head_dim=64)], "a100").iloc[0]
    assert vit.exec_flops / vit.flops == pytest.approx(208 / 197)
