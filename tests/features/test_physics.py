import dataclasses

import numpy as np
import pytest

import joulecast
from joulecast.data.errors import InputError
from joulecast.features import arch, physics
from joulecast.features.kernel_table import kernel_table
from joulecast.features.kinds import attention
from joulecast.features.power import idle_power_w


def physics_estimate(*args, **kwargs):
    """The physics half alone (these tests check the analytical model, not the learned residual)."""
    return joulecast.estimate(*args, estimator="physics", **kwargs)


def _one(record, gpu="a100", **kw):
    spec = joulecast.gpu(gpu) if isinstance(gpu, str) else gpu
    return physics.analyze(kernel_table([record]), spec, **kw)[0].iloc[0]


def test_roofline_large_gemm_is_compute_bound_and_elementwise_memory_bound():
    gemm = _one(dict(kind="gemm", m=8192, n=8192, k=8192, tensor_core=True))
    # A100 ridge point: 312 TFLOP/s / 1555 GB/s = 200 FLOP/byte.
    assert gemm.bound == "compute" and gemm.intensity_flop_per_byte > 400
    relu = _one(dict(kind="elementwise", op="relu", cols=2**28))
    assert relu.bound == "dram" and relu.intensity_flop_per_byte < 1
    # A big GEMM runs at the derated tensor peak at the clock the power cap leaves it (+ wave rounding, launch gap):
    # the A100-PCIe's measured 0.811 of it (its own card's matmul rate; the SXM4's 0.869), less 4 K-steps of pipeline
    # fill and epilogue on the 8192 / 32 = 256 of each tile.
    assert joulecast.gpu("a100").tensor_gemm_efficiency == 0.811
    assert joulecast.gpu("a100-sxm4-40gb").tensor_gemm_efficiency == 0.869
    ideal = 2 * 8192**3 / (312e12 * 0.811 * 256 / 260 * gemm.sm_clock_mhz / 1410)
    assert ideal <= gemm.time_s < 1.1 * ideal
    # The relu streams 2 x 512 MiB at 1555 GB/s x 0.85.
    assert relu.time_s == pytest.approx(2 * 2**28 * 2 / (1555e9 * 0.85), rel=0.01)


def test_cuda_core_gemms_on_dual_fp32_parts_get_the_fp32_only_half():
    """GA10x (A10, CC 8.6) counts a shared FP32/INT32 datapath in its FP32 peak; the A100 (CC 8.0) does not."""
    from dataclasses import replace

    sgemm = dict(kind="gemm", m=8192, n=8192, k=8192, dtype="fp32", acc_dtype="fp32", tensor_core=False)
    a10 = joulecast.gpu("a10")
    as_cc80 = replace(a10, compute_capability="8.0")
    t = [_one(sgemm, gpu, sm_clock_mhz=900).t_compute_s for gpu in (a10, as_cc80)]
    assert t[0] == pytest.approx(2 * t[1])
    # a streaming kernel's instruction issue gets the half too; a relu stays DRAM-bound all the same
    relu = dict(kind="elementwise", op="relu", cols=2**24, dtype="fp32", acc_dtype="fp32")
    on = [_one(relu, gpu, sm_clock_mhz=900) for gpu in (a10, as_cc80)]
    assert on[0].t_compute_s == pytest.approx(2 * on[1].t_compute_s) and on[0].time_s == on[1].time_s
    assert on[0].bound == "dram"


@pytest.mark.parametrize("gpu, dtype, transposed", [
    ("v100-sxm2", "fp32", False), ("v100-sxm2", "bf16", False), ("v100-sxm2", "fp16", True),
    ("a100-sxm4-80gb", "fp32", True), ("a100-sxm4-80gb", "bf16", True)])
def test_cudnn_transposes_a_convolutions_layout_only_where_it_runs_on_tensor_cores(gpu, dtype, transposed):
    """A convolution's NCHW -> NHWC transposes, forward and backward, run where its dtype has tensor cores (fp32
    multiplies in TF32): none on a V100 in fp32 or bf16, whose CUDA-core kernels read NCHW. Launched inside cuDNN's
    call, they cost no host dispatch of their own either way."""
    work = joulecast.workload("resnet-50", phase="training", batch=8, dtype=dtype)
    columns, _ = physics.analyze_arrays(work.kernels, joulecast.gpu(gpu))
    ops, count = np.asarray(columns["op"]).astype(str), np.asarray(columns["count"])
    transposes = np.isin(ops, arch.LAYOUT_TRANSPOSE_OPS)
    convs = int(work.kernels.loc[work.kernels["op"] == "conv2d", "count"].sum())
    assert int(count[ops == arch.LAYOUT_TRANSPOSE_OP].sum()) == (convs if transposed else 0)
    assert int(count[transposes].sum()) == (3 * convs if transposed else 0)  # the backward's two a convolution
    time = np.asarray(columns["time_s"]) * count
    assert (time[transposes] > 0).all() == transposed and time[transposes].sum() < 0.5 * time.sum()
    dispatched = physics.analyze_arrays(work.kernels, joulecast.gpu(gpu), host_dispatch_s=25e-6)[1]
    assert dispatched.host_s[0] == pytest.approx(count[~transposes].sum() * 25e-6 * arch.TRAINING_DISPATCH_FACTOR)


@pytest.mark.parametrize("gpu, dtype, faster", [("a100-sxm4-80gb", "bf16", True), ("v100-sxm2", "fp16", True),
                                                ("v100-sxm2", "fp32", False)])
def test_channels_last_saves_what_the_layout_transposes_cost_and_nothing_where_cudnn_runs_none(gpu, dtype, faster):
    """A ResNet-50 training step in NHWC (`channels_last`) takes the NCHW step's time less its transposes' (GPU-bound
    at 256 images); on a V100 in fp32, whose CUDA-core convolutions read NCHW and launch none, it is the same step."""
    spec = joulecast.gpu(gpu)
    nchw = joulecast.workload("resnet-50", phase="training", batch=256, dtype=dtype)
    nhwc = joulecast.workload("resnet-50", phase="training", batch=256, dtype=dtype, fusions=["channels_last"])
    columns, totals = physics.analyze_arrays(nchw.kernels, spec)
    _, fused = physics.analyze_arrays(nhwc.kernels, spec)
    ops = np.asarray(columns["op"]).astype(str)
    spent = float(np.sum((np.asarray(columns["time_s"]) * np.asarray(columns["count"]))[
        np.isin(ops, arch.LAYOUT_TRANSPOSE_OPS)]))
    assert (spent > 0) == faster
    assert fused.gpu_busy_s[0] == pytest.approx(totals.gpu_busy_s[0] - spent, rel=1e-9)
    assert (fused.energy_j[0] < totals.energy_j[0]) == faster


@pytest.mark.parametrize("gpu, dtype, winograd", [("v100-sxm2", "fp32", True), ("v100-sxm2", "fp16", False),
                                                   ("a100-sxm4-80gb", "fp32", False)])
def test_fp32_cuda_core_3x3_convolutions_issue_winograds_multiplies_forward_and_data_gradient(gpu, dtype, winograd,
                                                                                              monkeypatch):
    """A 3x3, stride-1 convolution in fp32 off the tensor cores (a V100's) runs cuDNN's fused Winograd F(2x2, 3x3),
    forward and data gradient: 16 multiplies for 36, the same utilisation in less time. ResNet-50 v1.5 has 13 such
    convolutions (16 bottleneck 3x3s, three of them stride 2); its weight gradients, its 1x1 and strided
    convolutions, and any convolution on tensor cores (fp16 on Volta, TF32 on Ampere) run as before."""
    from joulecast.data.labels import Labels
    from joulecast.features.kinds import conv2d

    work = joulecast.workload("resnet-50", phase="training", batch=64, dtype=dtype)
    spec = joulecast.gpu(gpu)
    columns, totals = physics.analyze_arrays(work.kernels, spec, sm_clock_mhz=900)  # locked: no cap solve moves it
    ops, count = np.asarray(columns["op"]).astype(str), np.asarray(columns["count"])
    labelled = {**columns, **{c: Labels.of(np.asarray(columns[c]).astype(str)) for c in ("kind", "op", "dtype")}}
    rows = conv2d.winograd(labelled, np.asarray(columns["tensor_core"]).astype(bool))  # a conv row: on_tensor
    assert int(count[rows & (ops == "conv2d")].sum()) == (13 if winograd else 0)
    assert int(count[rows & (ops == "conv2d_dgrad")].sum()) == (13 if winograd else 0)
    assert not (rows & (ops == "conv2d_wgrad")).any()
    monkeypatch.setattr(arch, "WINOGRAD_MULTIPLY_REDUCTION", 1.0)
    direct, direct_totals = physics.analyze_arrays(work.kernels, spec, sm_clock_mhz=900)
    executed, before = np.asarray(columns["exec_flops"]), np.asarray(direct["exec_flops"])
    np.testing.assert_allclose(executed[rows], before[rows] / 2.25)
    np.testing.assert_array_equal(executed[~rows], before[~rows])
    assert (totals.gpu_busy_s[0] < direct_totals.gpu_busy_s[0]) == winograd
    bound = rows & (np.asarray(columns["bound"]).astype(str) == "compute")
    assert bound.any() == winograd
    np.testing.assert_allclose(np.asarray(columns["t_compute_s"])[bound] * 2.25,
                               np.asarray(direct["t_compute_s"])[bound], rtol=1e-9)


def test_bf16_gemms_without_bf16_hardware_run_at_the_emulated_fraction_of_the_cuda_core_rate(monkeypatch):
    """Volta has no bf16 tensor cores or arithmetic: a bf16 GEMM runs on the CUDA cores at
    `EMULATED_BF16_GEMM_RATE` of their rate; where the GPU has bf16 tensor peaks the rate plays no part."""
    gemm = dict(kind="gemm", m=8192, n=8192, k=8192, dtype="bf16", tensor_core=True)
    v100, a100 = _one(gemm, "v100-sxm2", sm_clock_mhz=900), _one(gemm, "a100", sm_clock_mhz=900)
    assert not v100.tensor_core and v100.bound == "compute" and a100.tensor_core
    monkeypatch.setattr(arch, "EMULATED_BF16_GEMM_RATE", 1.0)
    assert v100.t_compute_s == pytest.approx(_one(gemm, "v100-sxm2", sm_clock_mhz=900).t_compute_s / 0.74)
    assert a100.t_compute_s == _one(gemm, "a100", sm_clock_mhz=900).t_compute_s
    # fp16, which Volta's tensor cores run, is untouched
    fp16 = dict(gemm, dtype="fp16")
    assert _one(fp16, "v100-sxm2", sm_clock_mhz=900).tensor_core


def test_a_chips_measured_tensor_gemm_efficiency_sets_its_tensor_core_gemms_alone():
    """The A100-PCIe's catalog entry carries its card's measured fraction of the tensor peak (0.811); a GPU without
    one takes `arch.GEMM_EFFICIENCY`. CUDA-core GEMMs keep the default either way."""
    from dataclasses import replace

    a100 = joulecast.gpu("a100")
    as_default = replace(a100, tensor_gemm_efficiency=None)
    bf16 = dict(kind="gemm", m=8192, n=8192, k=8192, tensor_core=True)
    sgemm = dict(bf16, dtype="fp32", acc_dtype="fp32", tensor_core=False)
    t = [_one(bf16, gpu, sm_clock_mhz=900).t_compute_s for gpu in (a100, as_default)]
    assert t[0] == pytest.approx(t[1] * arch.GEMM_EFFICIENCY / 0.811)
    assert _one(sgemm, a100, sm_clock_mhz=900).t_compute_s == _one(sgemm, as_default, sm_clock_mhz=900).t_compute_s
    assert joulecast.gpu("a10").tensor_gemm_efficiency is None and joulecast.gpu("h200").tensor_gemm_efficiency is None


def test_the_a100_pcie_reads_a_large_gemm_at_its_defaults_as_measured():
    """At its defaults (1,410 MHz, the 250 W cap throttling it), the A100-PCIe's physics reads an 8192^3 bf16 GEMM
    at the 220 TFLOP/s that Fire-Flyer's SC24 artifact measured on its PCIe cards (data/gpus/a100-pcie-40gb.yaml)."""
    n = 8192
    pcie = _one(dict(kind="gemm", m=n, n=n, k=n, tensor_core=True), "a100")
    assert pcie.sm_clock_mhz < 1300  # the cap holds the clock down
    assert 2 * n**3 / pcie.time_s / 1e12 == pytest.approx(220, rel=0.03)


def test_streaming_kernels_issue_their_instructions_at_the_sm_clock():
    """A 2^27-element fp32 softmax of 1,024-column rows issues 40 instructions per element on 108 SMs x 64 lanes: at
    900 MHz that takes longer than streaming its 1 GiB through DRAM, at 1410 MHz it does not."""
    softmax = dict(kind="softmax", op="softmax", rows=2**17, cols=1024, dtype="fp32", acc_dtype="fp32")
    slow, fast = (_one(softmax, sm_clock_mhz=mhz) for mhz in (900, 1410))
    assert slow.bound == "compute" and fast.bound == "dram"
    assert slow.t_compute_s == pytest.approx(2**27 * 40 / (108 * 64 * 900e6), rel=0.01)
    assert fast.time_s == pytest.approx(2 * 2**27 * 4 / (1555e9 * 0.85), rel=0.01)


def test_transcendental_activations_issue_more_instructions_than_adds():
    """tanh issues 16 + 36 instructions per element, an add 16: on 108 SMs x 64 lanes at 900 MHz, 2^27 bf16
    elements of tanh outlast their DRAM traffic, those of a scalar multiply do not."""
    tanh, mul = ({"kind": "elementwise", "op": op, "cols": 2**27} for op in ("tanh", "scalar_mul"))
    slow, quick = (_one(k, sm_clock_mhz=900) for k in (tanh, mul))
    assert slow.bound == "compute" and quick.bound == "dram"
    assert slow.t_compute_s == pytest.approx(2**27 * (16 + 36) / (108 * 64 * 900e6), rel=0.01)
    assert quick.t_compute_s == pytest.approx(2**27 * 16 / (108 * 64 * 900e6), rel=0.01)
    assert slow.t_dram_s == pytest.approx(quick.t_dram_s)


@pytest.mark.parametrize("gpu, sms, lanes", [("a100", 108, 64), ("h200", 132, 128)])
def test_an_unvectorised_op_takes_its_sm_cycles_an_element_on_any_architecture(gpu, sms, lanes):
    """A mask added over the scores (a broadcast operand: ATen's unrolled loop) issues 0.632 SM cycles an element,
    81 slots of Hopper's 128 FP32 lanes and 40 of Ampere's 64, where a contiguous add of as many bytes issues 16
    slots; the slots beyond those draw no FMA power, so the mask's kernel draws no more FMA activity than the add's."""
    from joulecast.features.kinds import streaming
    mask, add = ({"kind": "elementwise", "op": op, "cols": 2**28} for op in ("mask_add", "pointwise_add"))
    slow, quick = (_one(k, gpu=gpu, sm_clock_mhz=1200) for k in (mask, add))
    assert "mask_add" in streaming.UNVECTORISED_OPS and slow.bound == "compute" and quick.bound == "dram"
    assert slow.t_compute_s == pytest.approx(2**28 * 0.632 / (sms * 1200e6), rel=0.01)
    assert quick.t_compute_s == pytest.approx(2**28 * 16 / (sms * lanes * 1200e6), rel=0.01)
    assert slow.t_dram_s == pytest.approx(quick.t_dram_s)
    assert slow.u_fma * slow.time_s == pytest.approx(quick.u_fma * quick.time_s)  # the same arithmetic


def test_short_k_gemms_pay_for_each_tile_pipeline_fill():
    """Per FLOP, K = 768 (24 K-steps of 32 per tile) costs 28/24 of what K = 8192 (256 steps) costs per 256/260."""
    t = {k: _one(dict(kind="gemm", m=8192, n=8192, k=k, tensor_core=True), sm_clock_mhz=900).t_compute_s / k
         for k in (768, 8192)}
    assert t[768] / t[8192] == pytest.approx((28 / 24) / (260 / 256))


def test_a_workload_whose_traffic_fits_in_l2_finds_it_there_on_its_next_run(monkeypatch):
    """Run again and again, a workload whose whole DRAM traffic fits in L2's usable half reads none of it from DRAM;
    one that fills the L2 reads all of it; linear between. The H200's L2 holds 60 MiB."""
    h200 = joulecast.gpu("h200")
    assert h200.l2_bytes == 60 * 2**20
    gemvs = {n: dict(kind="gemm", m=1, n=n, k=4096, tensor_core=True) for n in (2048, 6144, 14336)}  # 17, 50, 117 MB
    kept = {n: _one(r, "h200") for n, r in gemvs.items()}
    monkeypatch.setattr(physics, "_l2_resident_share", lambda f, count, wid, n, gpu: np.zeros(n))
    cold = {n: _one(r, "h200") for n, r in gemvs.items()}
    assert all(cold[n].dram_bytes >= n * 4096 * 2 for n in gemvs)
    assert kept[2048].dram_bytes == 0 and kept[14336].dram_bytes == cold[14336].dram_bytes
    share = (h200.l2_bytes - cold[6144].dram_bytes) / (h200.l2_bytes * (1 - arch.L2_USABLE_FRACTION))
    assert 0 < share < 1 and kept[6144].dram_bytes == pytest.approx(cold[6144].dram_bytes * (1 - share))
    # read from L2, a GEMV draws less power than the same one streamed from DRAM
    assert kept[2048].power_w < cold[2048].power_w
    monkeypatch.undo()
    # the share is per workload: three of the 17 MB GEMVs in one workload fill 50 MB of L2, as the middle one does
    three = physics.analyze(kernel_table([dict(gemvs[2048], count=3)]), h200)[0].iloc[0]
    assert three.dram_bytes == pytest.approx(cold[2048].dram_bytes * (1 - (h200.l2_bytes - 3 * cold[2048].dram_bytes)
                                                                      / (h200.l2_bytes / 2)))


def test_a_gemm_tile_over_an_edge_loads_only_the_rows_there_are():
    """A GEMV (M = 1) on a 64-row tile loads one row of A a K-step, not 64: its L2 traffic is B's and the output."""
    gemv = _one(dict(kind="gemm", m=1, n=8192, k=8192, tensor_core=True), "h100-sxm")
    b_bytes = 8192 * 8192 * 2
    assert b_bytes <= gemv.l2_bytes < 1.05 * b_bytes


def test_a_gemm_streaming_a_long_k_reads_each_operand_once_and_a_wide_one_reads_a_per_wave_block():
    """DRAM traffic: where neither operand fits in L2, a wave of tiles steps along K together and reads the rows and
    columns of the output block it covers, so a weight gradient over a step's tokens (768 x 3,072 outputs: one wave
    on the A40) reads A and B once, and a GEMM whose output spans many waves reads A once a block column."""
    a40 = joulecast.gpu("a40")
    tokens = 72 * 384
    wgrad = _one(dict(kind="gemm", op="linear_wgrad", m=768, n=3072, k=tokens, dtype="fp32", acc_dtype="fp32",
                      tensor_core=True), a40)
    once = (768 * tokens + tokens * 3072) * 4 + 768 * 3072 * 4
    assert wgrad.dram_bytes == pytest.approx(once)
    wide = _one(dict(kind="gemm", op="linear_dgrad", m=768, n=tokens, k=30522, dtype="fp32", acc_dtype="fp32",
                     tensor_core=True), a40)
    area = a40.sm_count * wide.ctas_per_sm * wide.tile_m * wide.tile_n  # the output a wave covers
    a, b, c = 768 * 30522 * 4, 30522 * tokens * 4, 768 * tokens * 4
    assert wide.split_k == 1 and wide.dram_bytes == pytest.approx(a * tokens / (area / 768) + b + c)
    assert 3 * (a + b + c) > wide.dram_bytes > a + b + c
    # an operand that fits in L2 is held while the other streams: each read once (the weights, larger than the
    # H100's whole L2, find none of themselves there from the last run)
    gemv = _one(dict(kind="gemm", m=14336, n=1, k=4096, tensor_core=True), "h100-sxm")
    partials = 14336 * 4 * gemv.split_k * 2 if gemv.split_k > 1 else 0  # split-K's fp32 partial sums, both ways
    assert gemv.dram_bytes == pytest.approx(14336 * 4096 * 2 + 4096 * 2 + 14336 * 2 + partials)


def test_fused_attention_pays_for_each_ctas_prologue_against_its_key_blocks():
    """A CTA of 128 queries over 512 keys (8 blocks of 64) runs at 8/12 of the long-run efficiency; a causal one sees
    about half its keys, (512 - 255.5) / 512 of 8 blocks; 8,192 keys come close to the long-run figure."""
    def eff(seq, causal, op="flash"):
        k = dict(seq_q=np.array([seq]), seq_kv=np.array([seq]), causal=np.array([causal]), op=np.array([op]))
        return attention.efficiency(k, dict(k_iters=np.array([seq // 64])))[0]
    assert eff(512, False) == pytest.approx(arch.ATTENTION_EFFICIENCY * 8 / 12)
    # PyTorch's memory-efficient kernel (an explicit mask) at its share of FlashAttention-2's rate
    assert eff(512, False, "masked") == pytest.approx(attention.MEMORY_EFFICIENT_RATE * eff(512, False))
    blocks = 8 * (512 - 255.5) / 512
    assert eff(512, True) == pytest.approx(arch.ATTENTION_EFFICIENCY * blocks / (blocks + 4))
    # and physics times them so: 2,048 CTAs either way, 512 keys each (batch 16) against 8,192 (batch 1)
    per_flop = {}
    for batch, seq in ((16, 512), (1, 8192)):
        r = _one(dict(kind="attention", op="flash", dtype="bf16", acc_dtype="bf16", tensor_core=True, batch=batch,
                      heads=32, kv_heads=32, seq_q=seq, seq_kv=seq, head_dim=128, causal=False), gpu="h200",
                 sm_clock_mhz=900)  # a clock the power cap leaves alone
        per_flop[seq] = r.t_compute_s / r.flops
    assert per_flop[512] / per_flop[8192] == pytest.approx(eff(8192, False) / eff(512, False))
    assert eff(512, True) < eff(512, False) < eff(8192, True) < arch.ATTENTION_EFFICIENCY


def test_decode_attention_draws_the_power_of_its_padded_tiles_in_the_time_of_its_keys():
    """The split-KV decode's 64-row tiles keep the tensor pipes busy on rows without queries: power follows, time
    (the keys streamed from DRAM) does not. On the H200's measured decode attention (h200-first: batch 64, 2,048
    keys, 688 W) physics now reads within 3 %, against 589 W with 16-row tiles."""
    from unittest import mock
    row = dict(kind="attention", op="flash", dtype="bf16", acc_dtype="bf16", tensor_core=True, batch=64, heads=32,
               kv_heads=8, seq_q=1, seq_kv=2048, head_dim=128, causal=False)
    padded = _one(row, gpu="h200")
    with mock.patch.object(attention, "SPLIT_KV_BLOCK_ROWS", 16.0):
        sixteen = _one(row, gpu="h200")
    assert padded.time_s == pytest.approx(sixteen.time_s) and padded.bound == sixteen.bound == "dram"
    assert padded.u_tensor == pytest.approx(4 * sixteen.u_tensor)
    assert padded.power_w > sixteen.power_w + 50
    assert padded.power_w == pytest.approx(687.7, rel=0.03)


def test_tensor_core_gemms_with_misaligned_leading_dimensions_run_at_a_third():
    """ViT's eager attention (197 tokens): 197-wide bf16 score rows are not 16-byte multiples, 200-wide ones are.
    A batched product's K and output width count; a linear layer's token count (ViT-L at batch 1) does not."""
    def compute_s(op, batch, m, n, k, gpu="a100", **dtypes):
        return _one(dict(kind="gemm", tensor_core=True, op=op, batch=batch, m=m, n=n, k=k, **dtypes), gpu,
                    sm_clock_mhz=900).t_compute_s

    # 197 and 200 take the same tiles (two 128 wide) and K-steps (seven of 32): only the alignment differs, and the
    # per-kernel table says which is which
    assert [_one(dict(kind="gemm", tensor_core=True, op="bmm", batch=512, m=197, n=n, k=64)).misaligned
            for n in (197, 200)] == [True, False]
    assert compute_s("bmm", 512, 197, 197, 64) == pytest.approx(3 * compute_s("bmm", 512, 197, 200, 64))
    assert compute_s("bmm", 512, 197, 64, 197) == pytest.approx(3 * compute_s("bmm", 512, 197, 64, 200))
    # fp8 (on an H100's tensor cores) needs 16 elements: 200 is misaligned there, 208 is not
    fp8 = dict(dtype="fp8", acc_dtype="bf16", gpu="h100")
    assert compute_s("bmm", 512, 256, 200, 64, **fp8) == pytest.approx(3 * compute_s("bmm", 512, 256, 208, 64, **fp8))
    # nn.Linear: M = out features, N = tokens; 197 tokens are no leading dimension
    assert compute_s("linear", 1, 1024, 197, 1024) == pytest.approx(compute_s("linear", 1, 1024, 200, 1024))
    # a decode step: one query row's 2047 scores are small beside the 2047 x 128 cached keys, which stay aligned
    assert compute_s("bmm", 512, 1, 2047, 128) == pytest.approx(compute_s("bmm", 512, 1, 2048, 128))
    assert compute_s("bmm", 512, 1, 128, 2047) == pytest.approx(compute_s("bmm", 512, 1, 128, 2048))
    # CUDA-core (fp32) GEMMs load element by element anyway
    sgemm = dict(kind="gemm", op="bmm", batch=512, m=197, k=64, dtype="fp32", acc_dtype="fp32", tensor_core=False)
    t = [_one(dict(sgemm, n=n), sm_clock_mhz=900).t_compute_s for n in (197, 200)]
    assert t[0] == pytest.approx(t[1])


def test_dram_bandwidth_falls_below_the_saturating_clock():
    """Full bandwidth down to 0.6 of the maximum clock (846 MHz on the A100), then in proportion to the clock."""
    relu = dict(kind="elementwise", op="relu", cols=2**28)
    at = {mhz: _one(relu, sm_clock_mhz=mhz).time_s for mhz in (1410, 900, 423)}
    assert at[900] == at[1410] and at[423] == pytest.approx(2 * at[1410], rel=0.01)


def test_power_stays_between_idle_and_limit_and_cap_lowers_clock():
    gpu = joulecast.gpu("a100")
    gemm = dict(kind="gemm", m=8192, n=8192, k=8192, tensor_core=True)
    free = _one(gemm)
    assert free.power_w == pytest.approx(gpu.power_limit_w, rel=1e-3) and free.sm_clock_mhz < gpu.boost_clock_mhz
    capped = _one(gemm, power_limit_w=150)
    assert capped.power_w <= 150 + 1e-6 and capped.sm_clock_mhz < free.sm_clock_mhz and capped.time_s > free.time_s
    slow = _one(gemm, sm_clock_mhz=600)
    assert slow.sm_clock_mhz == 600 and idle_power_w(gpu, 600) < slow.power_w < 150


def test_the_limit_holds_the_average_so_idle_gaps_leave_kernels_headroom():
    """The limiter holds the power averaged over a pass: a host-bound pass's kernels may draw more than the limit by
    what its idle gaps leave under it, its average still at most the limit; without gaps the limit holds kernel by
    kernel, and a pass whose gaps leave room enough keeps its kernels at the maximum clock."""
    gpu = joulecast.gpu("a100")
    table = kernel_table([dict(kind="gemm", m=8192, n=8192, k=8192, tensor_core=True),
                          dict(kind="elementwise", op="relu", cols=2**10, count=40)])
    alone, alone_totals = physics.analyze_arrays(table, gpu)
    assert alone["power_w"].max() <= gpu.power_limit_w + 1e-9 and alone["sm_clock_mhz"][0] < gpu.boost_clock_mhz
    for dispatch, free in ((1e-4, False), (2e-3, True)):
        gapped, totals = physics.analyze_arrays(table, gpu, host_dispatch_s=dispatch)
        assert totals.time_s[0] > 1.1 * totals.gpu_busy_s[0]                          # idle gaps
        assert gapped["power_w"][0] > gpu.power_limit_w                                # the GEMM over the limit
        assert gapped["sm_clock_mhz"][0] > alone["sm_clock_mhz"][0]                    # less throttled
        assert (gapped["sm_clock_mhz"][0] == gpu.boost_clock_mhz) == free
        assert totals.energy_j[0] / totals.time_s[0] <= gpu.power_limit_w * (1 + 1e-9)  # the average holds
        kernels_j = float((gapped["energy_j"] * gapped["launches"]).sum())
        assert kernels_j + totals.idle_gap_energy_j[0] == pytest.approx(totals.energy_j[0], rel=1e-12)
    # an engine's host work between passes is a gap too; its power is held to the limit as well (an engine's entry
    # may say up to 20x idle, over a low limit)
    served, _ = physics.analyze_arrays(table, gpu, serial_host_s=0.2)
    assert served["sm_clock_mhz"][0] == gpu.boost_clock_mhz
    _, hot = physics.analyze_arrays(table, gpu, serial_host_s=0.2, serial_power_over_idle=20.0)
    assert hot.energy_j[0] / hot.time_s[0] <= gpu.power_limit_w * (1 + 1e-9)


@pytest.mark.parametrize("gpu", ["a10", "a100", "h100-sxm", "a100-sxm4-80gb", "h200", "l40s", "v100"])
def test_the_power_cap_counts_fitting_clocks_as_the_whole_grid_does(gpu, monkeypatch):
    """Bisection over the clock grid (a batch's many kernels) counts the clocks that fit the limit as evaluating every
    clock does, because at any limit a GPU allows the clocks that fit are the grid's first; and the clock the cap
    leaves is the same whichever way the count was taken."""
    spec = joulecast.gpu(gpu)
    w = joulecast.workload("llama-3-8b", phase="training", batch=4, seq=1024)
    f = physics._static_features(w.columns, spec)
    sub = {name: f[name] for name in physics._TIMELINE_INPUTS}
    rows = len(f["count"])
    rng = np.random.default_rng(len(gpu))
    low = rng.uniform(0.15, 0.6, rows) * spec.boost_clock_mhz
    high = low + rng.uniform(0.0, 0.4, rows) * spec.boost_clock_mhz
    steps = np.linspace(0.0, 1.0, physics._CAP_GRID)
    grid = low + (high - low) * steps[:, None]
    power = physics._timeline_and_power(sub, spec, grid, power_only=True)["power_w"]
    allowed = power[power > spec.idle_power_max_clock_w]  # a limit is above idle at the maximum clock
    for limit in np.quantile(allowed, [0.02, 0.1, 0.5, 0.9]):
        fits = power <= limit
        assert (np.diff(fits.astype(int), axis=0) <= 0).all()  # what the bisection stands on: a prefix fits
        expected = fits.sum(axis=0)
        monkeypatch.setattr(physics, "_CAP_GRID_AT_ONCE", 0)
        bisected = physics._fitting_clocks(sub, spec, low, high, steps, limit)[0]
        monkeypatch.setattr(physics, "_CAP_GRID_AT_ONCE", 10**9)
        np.testing.assert_array_equal(bisected, expected)
        np.testing.assert_array_equal(physics._fitting_clocks(sub, spec, low, high, steps, limit)[0], expected)
    # and every figure of the capped kernels the same, bit for bit: the whole grid's last stage is evaluated in full
    # and read at each kernel's clock, the bisection's kernels are evaluated again at theirs
    capped = max(spec.power_limit_w * 0.6, spec.power_limit_range_w[0])  # within the range the card takes
    monkeypatch.setattr(physics, "_CAP_GRID_AT_ONCE", 0)
    bisected, bisected_totals = physics.analyze_arrays(w.columns, spec, power_limit_w=capped)
    monkeypatch.setattr(physics, "_CAP_GRID_AT_ONCE", 10**9)
    whole_grid, whole_grid_totals = physics.analyze_arrays(w.columns, spec, power_limit_w=capped)
    for name in ("sm_clock_mhz", "time_s", "power_w", "energy_j", "t_compute_s", "t_dram_s", "t_l2_s", "u_tensor",
                 "u_fma", "u_l2", "u_dram", "u_sm"):
        np.testing.assert_array_equal(bisected[name], whole_grid[name], err_msg=name)
    np.testing.assert_array_equal(bisected["bound"].strings(), whole_grid["bound"].strings())
    np.testing.assert_array_equal(bisected_totals.energy_j, whole_grid_totals.energy_j)
    assert (bisected["sm_clock_mhz"] < spec.boost_clock_mhz).any()


def test_energy_rises_with_batch_and_sequence():
    gpu = "h100-sxm"
    energies = [physics_estimate(joulecast.workload("llama-3-8b", batch=b, seq=s), gpu).energy_j
                for b, s in ((1, 256), (4, 256), (4, 1024), (16, 1024))]
    assert np.all(np.diff(energies) > 0)


def test_lower_clock_is_slower_and_host_bound_runs_idle():
    w = joulecast.workload("qwen2-1.5b", batch=1, seq=128, attention="eager")
    fast = physics_estimate(w, "a100")
    slow = physics_estimate(w, "a100", sm_clock_mhz=600)
    assert slow.gpu_busy_s > fast.gpu_busy_s
    # 1,073 launches (961 traced kernels, 28 x 4 layout copies) x 25 us of eager dispatch exceed the GPU work: the
    # host sets the pace, overlapping the GPU's work only in part (their 2-norm), and the GPU idles between.
    host = 1073 * 25e-6
    assert fast.launches == 1073 and host < fast.time_s == pytest.approx(np.hypot(host, fast.gpu_busy_s))
    idle = fast.by_kernel_class.set_index("kernel_class").loc["idle (host-bound)"]
    assert idle.time_s == pytest.approx(fast.time_s - fast.gpu_busy_s)
    graph = physics_estimate(joulecast.workload("qwen2-1.5b", batch=1, seq=128, launch_mode="graph"), "a100")
    assert graph.time_s == pytest.approx(graph.gpu_busy_s)
    # a GPU-bound training step: its host's and GPU's overlap leave the pass a hair longer than its kernels (3e-11 s
    # of 0.12 s), no wait to show as a row
    step = physics_estimate(joulecast.workload("resnet-50", phase="training", batch=256), "a100-sxm4-80gb")
    assert 0 <= step.time_s - step.gpu_busy_s < 1e-6 * step.time_s
    assert "idle (host-bound)" not in set(step.by_kernel_class["kernel_class"])
    assert step.by_kernel_class["time_s"].sum() == pytest.approx(step.time_s)


def test_a_workload_states_its_hosts_dispatch_for_eager_launches_only():
    """A faster host (a machine's measured dispatch a launch) shortens a host-bound pass by the 2-norm rule; CUDA
    graphs dispatch nothing whatever the host; a stated dispatch outside 0-1 ms is refused, naming the field."""
    default = physics_estimate(joulecast.workload("qwen2-1.5b", batch=1, seq=128, attention="eager"), "a100")
    fast = physics_estimate(joulecast.workload("qwen2-1.5b", batch=1, seq=128, attention="eager",
                                               host_dispatch_s=10e-6), "a100")
    assert fast.gpu_busy_s == pytest.approx(default.gpu_busy_s)
    assert fast.time_s == pytest.approx(np.hypot(1073 * 10e-6, fast.gpu_busy_s)) and fast.time_s < default.time_s
    graph = physics_estimate(joulecast.workload("qwen2-1.5b", batch=1, seq=128, launch_mode="graph",
                                                host_dispatch_s=10e-6), "a100")
    assert graph.time_s == pytest.approx(graph.gpu_busy_s)
    for bad in (-1e-6, 2e-3, float("nan"), "fast"):
        with pytest.raises(InputError, match="host_dispatch_s: must be"):
            joulecast.workload("gpt2", host_dispatch_s=bad)


def test_a_serving_engine_adds_its_host_work_per_sequence_at_a_multiple_of_idle_power():
    engine = arch.SERVING_ENGINES["vllm-0.5.4"]
    alone = physics_estimate(joulecast.workload("llama-3-8b", phase="decode", batch=128, seq=256, launch_mode="graph"),
                             "h100-sxm")
    served = physics_estimate(joulecast.workload("llama-3-8b", phase="decode", batch=128, seq=256, launch_mode="graph",
                                                 engine="vllm-0.5.4"), "h100-sxm")
    host = 128 * engine["host_s_per_sequence"]  # 58 ms against a GPU step of about 12 ms
    assert host > 4 * alone.time_s and served.time_s == pytest.approx(served.gpu_busy_s + host)
    # Its own decode attention (a block per query head) reads Llama-3's grouped keys and values 4x through L2.
    assert served.gpu_busy_s > alone.gpu_busy_s
    idle = idle_power_w(joulecast.gpu("h100-sxm"), joulecast.gpu("h100-sxm").boost_clock_mhz)
    gap = served.by_kernel_class.set_index("kernel_class").loc["idle (host-bound)"]
    assert gap.time_s == pytest.approx(host) and gap.energy_j == pytest.approx(host * engine["power_over_idle"] * idle)
    with pytest.raises(InputError, match="engine: unknown 'vllm-9'; did you mean 'vllm-0.5.4'"):
        joulecast.workload("llama-3-8b", phase="decode", engine="vllm-9")


def test_host_work_that_runs_under_the_pass_adds_only_what_outlasts_it():
    """An engine that schedules a step ahead (`serial_overlaps`): its host work runs under the GPU's pass, so the
    pass takes the longer of the two and the GPU waits, at the engine's power, only for the host's excess; between
    passes (the default) it adds all of it. Under another host's dispatch the wait moves with the pass."""
    k = joulecast.workload("llama-3-8b", phase="decode", batch=64, seq=512, launch_mode="graph").kernels
    h100 = joulecast.gpu("h100-sxm")
    idle = idle_power_w(h100, h100.boost_clock_mhz)
    _, alone = physics.analyze(k, h100)
    for share, bound in ((0.5, False), (3.0, True)):
        host = share * alone.time_s[0]
        _, between = physics.analyze(k, h100, serial_host_s=host, serial_power_over_idle=1.5)
        _, under = physics.analyze(k, h100, serial_host_s=host, serial_overlaps=1.0, serial_power_over_idle=1.5)
        assert between.time_s[0] == pytest.approx(alone.time_s[0] + host)
        assert under.time_s[0] == pytest.approx(max(alone.time_s[0], host))
        wait = max(host - alone.time_s[0], 0.0)
        assert under.idle_gap_energy_j[0] == pytest.approx(alone.idle_gap_energy_j[0] + wait * 1.5 * idle)
        assert under.engine_host_s[0] == 0.0 and between.engine_host_s[0] == host  # not serving's serial host work
        assert (under.time_s[0] > alone.time_s[0]) == bound
        assert under.host_range_time_s[0] == pytest.approx(np.maximum(alone.host_range_time_s[0], host))


def test_an_engines_measured_range_of_host_work_moves_the_pass_as_the_work_itself_would():
    """`serial_host_range_s`: the engine's host work at each end of its measured rows' range gives the pass's time
    and energy that work would give as the figure (between passes all of it, under the pass what outlasts it, the
    GPU waiting at the engine's power); without a range both ends are the pass's own, and the point never moves."""
    k = joulecast.workload("llama-3-8b", phase="decode", batch=64, seq=512, launch_mode="graph").kernels
    h100 = joulecast.gpu("h100-sxm")
    step = physics.analyze(k, h100)[1].time_s[0]
    ends = (0.2 * step, 3.0 * step)
    for overlaps in (0.0, 1.0):
        setting = dict(serial_overlaps=overlaps, serial_power_over_idle=1.5)
        _, point = physics.analyze(k, h100, serial_host_s=0.5 * step, **setting)
        assert (point.engine_range_time_s[0] == point.time_s[0]).all()
        assert (point.engine_range_energy_j[0] == point.energy_j[0]).all()
        _, spread = physics.analyze(k, h100, serial_host_s=0.5 * step, serial_host_range_s=np.array([ends]), **setting)
        assert spread.time_s[0] == point.time_s[0] and spread.energy_j[0] == point.energy_j[0]
        for end, host in enumerate(ends):
            _, at = physics.analyze(k, h100, serial_host_s=host, **setting)
            assert spread.engine_range_time_s[0, end] == pytest.approx(at.time_s[0])
            assert spread.engine_range_energy_j[0, end] == pytest.approx(at.energy_j[0])
    # under the pass, host work shorter than the pass adds nothing at either end it stays under
    assert spread.engine_range_time_s[0, 0] == pytest.approx(step)


def test_kernels_a_library_launches_cost_no_host_dispatch():
    """cuDNN's layout transposes run inside the convolution's dispatch: GPU time, but no eager dispatch of their own."""
    k = joulecast.workload("resnet-101", batch=8).kernels
    _, totals = physics.analyze(k, joulecast.gpu("a100"), host_dispatch_s=25e-6)
    dispatched = int(k["count"].sum()) - int(k.loc[k.op == "nchw_to_nhwc", "count"].sum())
    assert dispatched == 344  # as eager PyTorch runs ResNet-101 (the EnergAIzer importer's note)
    assert totals.host_s[0] == pytest.approx(dispatched * 25e-6)
    without = physics.analyze(k[k.op != "nchw_to_nhwc"], joulecast.gpu("a100"), host_dispatch_s=25e-6)[1]
    assert totals.host_s[0] == pytest.approx(without.host_s[0]) and totals.gpu_busy_s[0] > without.gpu_busy_s[0]


def test_a_one_kernel_loop_is_paced_by_the_slower_of_gpu_and_host():
    """One kernel launched again and again takes the longer of its GPU time and its dispatch; a workload of several
    kernels overlaps the two only in part (their 2-norm), whichever way round, and either way per workload."""
    h200 = joulecast.gpu("h200")
    one = dict(kind="gemm", m=1024, n=1024, k=1024, tensor_core=True)
    for dispatch in (2e-6, 40e-6):  # GPU-bound, then host-bound
        _, alone = physics.analyze(kernel_table([one]), h200, host_dispatch_s=dispatch)
        assert alone.time_s[0] == pytest.approx(max(alone.gpu_busy_s[0], dispatch))
        two = [dict(one, n=2048), dict(one, m=2048)]
        _, pair = physics.analyze(kernel_table(two), h200, host_dispatch_s=dispatch)
        assert pair.time_s[0] == pytest.approx(np.hypot(pair.gpu_busy_s[0], 2 * dispatch))
        both = kernel_table([one, *two]).assign(workload_id=[0, 1, 1])
        _, batch = physics.analyze(both, h200, host_dispatch_s=dispatch)
        np.testing.assert_allclose(batch.time_s, [alone.time_s[0], pair.time_s[0]])


def test_idle_power_follows_the_dvfs_table():
    gpu = joulecast.gpu("a100-pcie-40gb")
    # EnergAIzer's A100 idle table: 44.5 W at 210 MHz, 54.3 W at 1200 MHz, 67.3 W at 1410 MHz.
    assert idle_power_w(gpu, 210) == pytest.approx(44.5, abs=0.5)
    assert idle_power_w(gpu, 1200) == pytest.approx(54.3, abs=1.5)
    assert idle_power_w(gpu, 1410) == pytest.approx(67.3, abs=0.1)


def test_the_hot_static_term_adds_idle_power_in_proportion_to_the_sm_active_share(monkeypatch):
    """Static power under load: idle(f) * (1 + HOT_STATIC_RATIO * u_sm), on kernels the power cap leaves alone."""
    gpu = joulecast.gpu("a100")
    kernels = [dict(kind="elementwise", op="relu", cols=2**28), dict(kind="elementwise", op="relu", cols=2**10),
               dict(kind="gemm", m=1024, n=1024, k=1024, tensor_core=True)]
    ratio = 0.65  # the ratio experiments/hot_static_power.py fits (the shipped physics leaves it at 0)
    monkeypatch.setattr(arch, "HOT_STATIC_RATIO", ratio)
    hot = [_one(k, sm_clock_mhz=900) for k in kernels]
    monkeypatch.setattr(arch, "HOT_STATIC_RATIO", 0.0)
    cool = [_one(k, sm_clock_mhz=900) for k in kernels]
    idle = float(idle_power_w(gpu, 900))
    for h, c in zip(hot, cool):
        assert h.power_w < gpu.power_limit_w and h.time_s == c.time_s
        assert h.power_w - c.power_w == pytest.approx(idle * ratio * h.u_sm, rel=1e-9)
    assert hot[0].u_sm > 0.9 and hot[1].u_sm < 0.1   # a full-GPU stream heats it; a one-CTA kernel barely


def test_bad_clock_and_power_limit_are_named():
    w = joulecast.workload("gpt2", batch=1, seq=64)
    with pytest.raises(InputError, match=r"sm_clock_mhz: must be between 212 and 1410 MHz on a100-pcie-40gb, got 5000"):
        physics_estimate(w, "a100", sm_clock_mhz=5000)
    # the A100-PCIe's least is idle at its maximum clock, which a limit must exceed
    with pytest.raises(InputError, match=r"power_limit_w: must be above 67.3 and at most 250 W on a100-pcie-40gb"):
        physics_estimate(w, "a100", power_limit_w=10)


def test_batched_analysis_equals_one_by_one():
    from joulecast.data.kernels import stack
    gpu = joulecast.gpu("l40s")
    ws = [joulecast.workload(m, batch=b, seq=256) for m, b in (("gpt2", 1), ("opt-1.3b", 4), ("mistral-7b", 2))]
    _, together = physics.analyze(stack({i: w.kernels for i, w in enumerate(ws)}), gpu, host_dispatch_s=25e-6)
    alone = [physics.analyze(w.kernels, gpu, host_dispatch_s=25e-6)[1].energy_j[0] for w in ws]
    assert together.energy_j == pytest.approx(alone)


def test_a_tables_structure_is_kept_only_for_tables_and_gpus_like_it():
    """What a table's kinds, dtypes and flags give on a GPU is kept for the next table of the same names and codes
    on the same GPU (a catalog model's workloads at any size): every figure is the one a fresh computation gives,
    across GPUs, sizes and a dtype that changes the codes, and the kept arrays cannot be written to."""
    def run(w, gpu):
        f, totals = physics.analyze_arrays(w.encoded_columns(), joulecast.gpu(gpu))
        return f, float(totals.energy_j[0])

    works = [joulecast.workload("llama-3-8b", batch=b, seq=512, dtype=d) for b, d in ((2, "bf16"), (3, "bf16"),
                                                                                       (2, "fp32"))]
    kept = [run(w, g) for w in works for g in ("h100-sxm", "a10", "h100-sxm")]
    physics._STRUCTURES.clear()
    fresh = []
    for w in works:
        for g in ("h100-sxm", "a10", "h100-sxm"):
            physics._STRUCTURES.clear()
            fresh.append(run(w, g))
    for (f_kept, e_kept), (f_fresh, e_fresh) in zip(kept, fresh):
        assert e_kept == e_fresh
        for name in ("time_s", "power_w", "tensor_core", "tiles", "dram_bytes"):
            np.testing.assert_array_equal(f_kept[name], f_fresh[name], err_msg=name)
    f, _ = run(works[0], "h100-sxm")
    f["tensor_core"][0] = not f["tensor_core"][0]  # the features are the caller's own
    structure = next(iter(physics._STRUCTURES.values()))[1]
    with pytest.raises(ValueError):
        structure["peak_flops_ref"][0] = 0.0


def test_a_batchs_table_keeps_no_structure():
    """Only a table of one estimate's size keeps its structure: a batch's (more than _WHOLE_TABLE_ROWS rows) would
    hold its arrays in memory for nothing."""
    from joulecast.data.kernels import stack

    works = [joulecast.workload("llama-3-8b", batch=b, seq=512) for b in range(1, 20)]
    table = stack({i: w.columns for i, w in enumerate(works)})
    assert len(table["count"]) > physics._WHOLE_TABLE_ROWS
    physics._STRUCTURES.clear()
    physics.analyze_arrays(table, joulecast.gpu("h100-sxm"))
    assert not physics._STRUCTURES
    physics.analyze_arrays(works[0].encoded_columns(), joulecast.gpu("h100-sxm"))
    assert len(physics._STRUCTURES) == 1


def test_a_softmax_too_wide_for_the_persistent_kernel_takes_its_kinds_row_block_cost(monkeypatch):
    """Above SOFTMAX_PERSISTENT_MAX_COLS columns ATen runs a CTA a row, issued at the kind's
    `row_block_instructions_per_element` (shipped at 1.5x the persistent kernel's); up to it, at the persistent
    kernel's. With the kind's row-block cost set to the persistent one's, the wide row issues a third less."""
    import dataclasses

    from joulecast.features import kinds
    from joulecast.features.kinds import softmax

    wide, narrow = (dict(kind="softmax", rows=4096, cols=c) for c in (4096, 1024))
    shipped = [_one(k, sm_clock_mhz=900) for k in (wide, narrow)]
    assert softmax.ROW_BLOCK_INSTRUCTIONS == 1.5 * softmax.PERSISTENT_INSTRUCTIONS
    assert shipped[0].exec_flops == pytest.approx(2 * 4096 * 4096 * softmax.ROW_BLOCK_INSTRUCTIONS)
    assert shipped[1].exec_flops == pytest.approx(2 * 4096 * 1024 * softmax.PERSISTENT_INSTRUCTIONS)
    kind = kinds.REGISTRY["softmax"]
    flat = dataclasses.replace(kind.streaming, row_block_instructions_per_element=softmax.PERSISTENT_INSTRUCTIONS)
    monkeypatch.setattr(kinds, "REGISTRY", {**kinds.REGISTRY, "softmax": dataclasses.replace(kind, streaming=flat)})
    persistent = [_one(k, sm_clock_mhz=900) for k in (wide, narrow)]
    assert persistent[0].exec_flops == pytest.approx(shipped[0].exec_flops / 1.5)
    assert persistent[1].exec_flops == shipped[1].exec_flops
    # at 900 MHz the A100 issues a wide softmax's instructions slower than its DRAM streams the rows
    assert shipped[0].time_s > 1.2 * persistent[0].time_s and shipped[1].time_s == persistent[1].time_s


def test_a_kernel_a_power_limit_leaves_alone_draws_what_it_draws_at_the_default():
    """The static term under load is power a busy kernel's issued work draws (`arch.HOT_STATIC_RATIO`), not the die's
    heat, so a lower limit that leaves a kernel's clock alone leaves its power alone: a capped kernel at a clock draws
    what that clock locked would (before, the term was scaled by limit / default)."""
    gpu = dataclasses.replace(joulecast.gpu("a100"), power_limit_max_w=300.0)  # a card that takes 300 W
    small = dict(kind="elementwise", op="relu", cols=2**20)
    idle = float(idle_power_w(gpu, 900))
    drawn = [_one(small, gpu, sm_clock_mhz=900, power_limit_w=limit) for limit in (gpu.power_limit_w, 150.0, 300.0)]
    assert all(k.power_w < 150.0 for k in drawn)  # under every limit: the cap moves nothing
    assert [k.power_w for k in drawn] == pytest.approx([drawn[0].power_w] * 3, rel=1e-12)
    assert drawn[0].power_w > idle * (1 + arch.HOT_STATIC_RATIO * drawn[0].u_sm) > idle  # the term is in it
    assert arch.HOT_STATIC_RATIO > 0


def test_a_training_step_pays_autograds_host_time_and_overlaps_the_gpu_nearer_its_maximum():
    """A training step (backward kernels in it) dispatches each launch at TRAINING_DISPATCH_FACTOR times the host's
    time and takes the TRAINING_OVERLAP_NORM of its host and GPU time; a forward pass keeps the host's own dispatch
    and the 2-norm. The estimate reports the host's own figure either way."""
    host_s = 20e-6
    step = joulecast.estimate(joulecast.workload("gpt2", phase="training", batch=8, seq=512, host_dispatch_s=host_s),
                              "h200", estimator="physics")
    p, host = arch.TRAINING_OVERLAP_NORM, step.launches * host_s * arch.TRAINING_DISPATCH_FACTOR
    assert arch.TRAINING_DISPATCH_FACTOR > 1 and p > arch.OVERLAP_NORM
    assert step.time_s == pytest.approx((step.gpu_busy_s ** p + host ** p) ** (1 / p), rel=1e-9)
    assert step.host_dispatch_s == host_s
    forward = joulecast.estimate(joulecast.workload("gpt2", batch=8, seq=512, host_dispatch_s=host_s), "h200",
                                 estimator="physics")
    assert forward.time_s == pytest.approx(np.hypot(forward.gpu_busy_s, forward.launches * host_s), rel=1e-9)
