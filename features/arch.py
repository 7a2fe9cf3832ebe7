"""Physics constants the datasheet rows do not carry: efficiencies, timeline, DVFS shape, power coefficients.

Each value is either a documented figure (with its source) or a named assumption that the learned residual
(`joulecast.training`) corrects. Nothing is fitted by a solver; five assumptions (`OVERLAP_NORM`,
`DRAM_SATURATING_CLOCK_RATIO`, `MISALIGNED_GEMM_RATE` here, the streaming kinds' `instructions_per_element` and
`kinds.streaming.TRANSCENDENTAL_INSTRUCTIONS_PER_ELEMENT`) were chosen by looking at EnergAIzer measurements, and their
comments say which; `HOT_STATIC_RATIO` was chosen on a grid, each GPU with kernel-level rows scored with the value the
other two choose (experiments/hot_static_power.py).
"""

from __future__ import annotations

from joulecast.data import architectures, engines

# The per-architecture traits (tile shapes, residency, L2 bandwidth) are data with their sources:
# `joulecast.data.architectures` (data/architectures/*.yaml).
ArchTraits = architectures.ArchTraits


def traits(architecture: str) -> ArchTraits:
    return architectures.architecture(architecture)


# Fractions of peak that tuned kernels reach (assumptions; the learned residual corrects them):
# cuBLAS BF16 GEMMs on an H200 reach 687-795 TFLOP/s with the clock throttled to 1455-1470 MHz (gpus.md M[24]): 87-100 %
# of the peak at that clock; the midpoint, for a long K. A chip measured to reach less carries its own figure in the
# catalog (`GpuSpec.tensor_gemm_efficiency`): the A100 (GA100) 0.869, its Maximum Achievable Matmul FLOPS over the 312
# TFLOP/s peak (the SXM card's; since 2026-12-04 the PCIe card's own, below). Its EnergAIzer bf16 rows ran 15-20 % over
# physics' time at every DVFS clock (510-1,410 MHz) while its fp32 rows (CUDA cores) and the A10's bf16 ones (GA102,
# half the tensor rate a SM) did not. With it: physics energy MAPE A100-PCIe 12.3 -> 11.3 %; Wilkins' generations, not
# looked at in choosing it (experiments/generation_jobs.py; the model retrained), Llama-2 A100-PCIe 10.1 / 10.9 -> 9.3 /
# 10.4 %, A100-SXM4 12.3 / 12.6 -> 10.5 / 11.2 %, Mistral 7.0 / 7.2 -> 5.4 / 6.2 % and 13.1 / 13.6 -> 12.8 / 13.1 %
# (input / output sweeps); leave-one-model-out (3 tree seeds) A100 5.05 -> 4.92 %. The A100-PCIe carries its own card's
# MAMF row, 252.9 TFLOP/s (0.811, the same table; shipped 2026-12-04 with the residual's level per operand width,
# `joulecast.estimator.residual.level_of`): its bf16 rows of 4,096 tokens or more ran 12-21 % over physics' time at
# 510-1,050 MHz, far under its cap, as at 1,410 (16 %), so the cap's throttling does not explain the gap, and the card's
# measured rate is taken at every clock. Physics energy MAPE A100-PCIe 11.2 -> 10.2 %, the others the same. With
# softmax's row-block cost at 1.5x as well (`kinds.softmax`, shipped the same day): A100-PCIe 9.6 %.
GEMM_EFFICIENCY = 0.93
# Each CTA tile also fills its multistage pipeline before the first MMA and stores its output tile after the last:
# about 4 K-steps' worth (assumption; CUTLASS Ampere kernels keep 3-4 stages), so a K of 768 (24 steps of 32) runs
# at 24/28 of the rate of a long K.
GEMM_TILE_OVERHEAD_K_STEPS = 4
# Tensor-core GEMMs load their operands 16 bytes at a time (Ampere's cp.async, Hopper's TMA), which needs each
# leading dimension to be a multiple of 16 bytes (8 bf16 elements); cuBLAS otherwise picks kernels with narrow
# loads ("Tensor Core Requirements", NVIDIA Matrix Multiplication Background User's Guide). Those run at a third
# of the aligned rate (assumption, chosen on EnergAIzer's ViT-L bf16 rows, whose eager attention multiplies
# 197-wide score rows: at 1/3, the log of their measured/physics time at batch 16-64 moves from 0.285 to 0.200 on
# the A100, among 0.12-0.23 for the text models at 2048 tokens or more, and from 0.091 to -0.013 on the A10, among
# 0.01-0.05; the text models' shapes are all aligned).
GEMM_ALIGN_BYTES = 16
MISALIGNED_GEMM_RATE = 1 / 3
# Volta has neither bf16 tensor cores nor bf16 arithmetic: cuBLAS runs a bf16 GEMM on the CUDA cores, converting
# each operand to fp32, at 0.71-0.76 of its fp32 rate on the same square shapes (V100-SXM2-16GB, PyTorch 2.7 / CUDA
# 12.8, n = 1,024-10,240: bf16 7.78-10.65 TFLOP/s against fp32 10.56-14.51; public report, GitHub
# zzc0721/torch-performance-test-data issue #140, M); 0.69 on a V100-PCIe at m = 2,048 (9.6 against 14.0 TFLOP/s,
# GitHub lablup/mlxcel issue #1654, M). The SXM2 card's median over its five shapes, 0.737:
EMULATED_BF16_GEMM_RATE = 0.74
# A 3x3, stride-1 convolution in fp32 on CUDA cores (a GPU with no tensor cores for it: Volta, which has no TF32)
# runs Winograd's minimal filtering (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016,
# arXiv 1509.09308): F(2x2, 3x3) computes each 2x2 output tile's 3x3 window with 16 multiplies instead of 36, almost
# all of them a batched GEMM. cuDNN has it for the forward pass and the data gradient as fused kernels
# (CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, which "requires 3x3 filter" (NVIDIA developer forum), and
# CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD), the weight gradient only unfused, through memory; its fp32 Winograd
# kernels of 2x2 and 4x4 tiles are what cudnnFind picks on ImageNet models' 3x3 layers (Gray and Koester, "Still not
# slowing down: Benchmarking optimized Winograd implementations", Intel AI blog, 2016), as PyTorch's
# cudnn.benchmark finds them. Physics issues such a forward or data-gradient GEMM's multiplies over this, 2x2 tiles'
# reduction (the smaller; transforms in registers, no traffic of their own). Measured after: NVIDIA's published V100
# FP32 ResNet-50 rates (experiments/resnet_throughput.py) and Zeus' V100 ResNet-50 epochs (zeus_power_limits.py),
# experiments/HISTORY.md; a tensor-core convolution is left as it was (cuDNN's tensor-core kernels are implicit GEMMs).
WINOGRAD_MULTIPLY_REDUCTION = 36 / 16
# Nor do those 16-bit GEMMs off the tensor cores split K to fill a skinny grid, as cuBLAS's tensor-core and fp32 ones,
# and cuDNN's convolutions (a depthwise one's weight gradient reduces over every pixel), do (assumption, from a public
# report and one set of rows). Report: on sm_75 parts without tensor cores, an fp16 matmul of 2-16 rows ran at about 4 %
# of the GEMV's rate, where fp32 and the T4's tensor cores did not (GitHub pytorch/pytorch issue #195716, M: kernel
# selection, the report says). Rows: Wilkins' Llama-2-7B generations on the V100-PCIe-16GB (bf16, no KV cache;
# experiments/generation_jobs.py) take 0.21-0.22 s a step at 8-32-token prompts, 2.6 TFLOP/s. A grid of 32 to 86 CTAs of
# 128 x 64 on 80 SMs, one K pass each, gives 0.20 s; split to fill the SMs, 0.125 s. Their time error there goes -40 to
# -42 % -> -7 to -11 %; the V100 cells' time MAPE: Llama-2 input / output 29.7 / 23.0 -> 22.0 / 18.2 %, Mistral 17.9 /
# 22.2 -> 12.5 / 10.4 %. Their power then reads 29 % high at 8 tokens (103 W measured, 133 W physics) and about 10 % low
# at 512-2,048: energy MAPE Llama-2 16.3 / 8.1 -> 18.3 / 10.4 %, Mistral 13.7 / 10.0 -> 10.9 / 7.0 %. True restores the
# split (a study's setting).
SIMT_16BIT_SPLITS_K = False
# Their tiles keep 64 along the output's narrower side at every size (assumption, from the same rows): the catalog's
# CUTLASS default SIMT tile, 128 x 128, takes 64 only where that side is at most 64, so a step's GEMMs doubled their
# work per CTA from 64 to 65 tokens, where Wilkins' V100 steps grow smoothly (0.22 s a step at 32-token prompts, 0.28
# at 64, 0.33 at 128, 0.44 at 256; physics read 0.38, 0.46 and 0.77). 128 x 64 at every size reads 0.23, 0.38 and
# 0.47 (experiments/generation_jobs.py; HISTORY.md, 2026-12-05's sixth session). None: the catalog's tile there too.
SIMT_16BIT_NARROW_TILE: int | None = 64
DRAM_EFFICIENCY = 0.85      # STREAM-like kernels reach 85-92% of peak DRAM bandwidth
L2_EFFICIENCY = 0.80
ATTENTION_EFFICIENCY = 0.65  # FlashAttention-2 forward: 50-73% of A100 peak (Dao 2023, fig. 4); a long run of keys
# (short ones lose a CTA's prologue and epilogue: `joulecast.features.kinds.attention.efficiency`)

# GA10x and AD10x SMs (compute capability 8.6, 8.7, 8.9) count two FP32 datapaths per SM partition in their FP32
# peak, one of them shared with INT32 (NVIDIA Ampere GA102 GPU architecture whitepaper, 2020). A CUDA-core GEMM's
# inner loop, and a streaming kernel's address arithmetic, keep the shared one busy with integer work, so both are
# given the FP32-only half (assumption; ViT-L in fp32 on the A10, EnergAIzer a10.csv, runs at about half the
# datasheet peak overall). Measured, not shipped (2026-12-04): its four fp32 rows (GEMMs on the CUDA cores) read 37 %
# slow at 0.5 and 2 % at 0.7, but their power stays 21-22 % low at either (the FMA term, a share of the A10's
# 83 W budget, is small), so their energy goes +6.4 -> -19.9 % and the A10's MAPE 8.35 -> 9.27 %: the time the half
# adds stands in for power the FMA term misses.
DUAL_FP32_COMPUTE_CAPABILITIES = frozenset({"8.6", "8.7", "8.9"})
DUAL_FP32_FRACTION = 0.5

# Share of the L2 that one kernel's reused working set may occupy before it spills (assumption: half); a workload
# whose whole DRAM traffic fits in it finds all of it there on its next run (`physics._l2_resident_share`).
L2_USABLE_FRACTION = 0.5

# Streaming-kernel CTA sizes (PyTorch ATen): elementwise kernels use 128 threads x 4 elements per thread;
# the persistent softmax handles 4 rows per 128-thread block up to 1024 columns, one row per block above;
# layer norm uses one block per row.
ELEMENTWISE_ELEMENTS_PER_CTA = 512
STREAMING_THREADS_PER_CTA = 128
SOFTMAX_ROWS_PER_CTA = 4
SOFTMAX_PERSISTENT_MAX_COLS = 1024

# Timeline constants (assumptions, typical CUDA launch microbenchmarks on A100/H100):
KERNEL_MIN_S = 2.0e-6       # an almost empty kernel takes 2-3 us from start to completion
LAUNCH_GAP_S = 1.0e-6       # back-to-back kernels on one stream leave about 1 us between them
# PyTorch eager dispatch: one host-side launch takes tens of microseconds through the Python and ATen layers; the
# EnergAIzer PROVENANCE notes 27-30 us per kernel on host-bound runs. CUDA graphs remove it. Measured, not shipped
# (2026-12-04): each EnergAIzer file's own host-bound rows imply 19.8 us on the A10's machine (11 rows) and 23.9 us on
# the A100's (73 rows; `experiments/host_dispatch.py --energaizer`, the method that sets a collection's card). Stated
# on their rows, as a collection's is: physics energy MAPE A10 8.4 -> 7.2 % (its host-bound BERT and GPT-2 passes
# read 20-37 % high at 25 us), leave-one-model-out (3 tree seeds) A10 4.51 -> 4.32 %, A100 4.90 -> 4.94 %. But the
# A10's physics spread, which sets Ampere's margin for a GPU not trained on, fell 0.201 -> 0.142 (log, 90 % of its
# rows): the A100-PCIe held out covered 97.3 -> 79.6 % (experiments/gpu_transfer.py --margins; 89.4 % with an
# architecture's margin floored at its kind's over every GPU, the A10 then 96.8 %), and the forward margin over
# every GPU 0.181 -> 0.170, which the kinds no two GPUs ran take: whole jobs (experiments/job_coverage.py, retrained,
# floored) train-run 80.2 -> 75.2 %, serve 84.0 -> 82.1 %, generate 95.5 % the same.
HOST_DISPATCH_S = {"eager": 25.0e-6, "graph": 0.0}
# The hosts measured so far took 18-30 us an eager launch: the H200 collection's host 18.0 (its model passes,
# data/measurements/h200/h200-first, experiments/host_dispatch.py), two later lent H200 machines' 24.3 and 24.7
# (data/repeats/h200/h200-repeat, data/measurements/h200/h200-prefill), Wilkins' Palmetto A100 node 22.3-25.7 and Swing
# node 25.4-26.3 (experiments/generation_jobs.py, each read from one sweep's host-bound rows), EnergAIzer's hosts
# 27-30 us per listed kernel on their small runs (its PROVENANCE.md). An estimate whose machine states none takes the
# default above, and its interval spans what a host of this range makes of it (`estimator.api.combine`).
HOST_DISPATCH_RANGE_S = (18.0e-6, 30.0e-6)
# Serving engines, each a catalog entry with its sources (`data/serving_engines.yaml`): name -> the host work between
# steps per running sequence (s) and its measured rows' (lowest, highest), whether it runs under the GPU's step
# instead, the GPU's power while it waits (x idle) and the engine's own decode attention kernel.
SERVING_ENGINES = {name: {"host_s_per_sequence": e.host_s_per_sequence,
                          "host_s_per_sequence_range": e.host_s_per_sequence_range, "host_overlaps": e.host_overlaps,
                          "power_over_idle": e.power_over_idle, "decode_attention": e.decode_attention}
                   for name, e in engines.catalog().items()}
# PyTorch's vision models keep activations NCHW; cuDNN's implicit-GEMM tensor-core kernels read NHWC (names such as
# `..._nhwckrsc_nchw_...`: NHWC activations, KRSC filters, NCHW output), so cuDNN transposes each convolution's input
# first (`nchwToNhwcKernel` in profiles; the PyTorch performance tuning guide's advice to use channels_last avoids
# it). With it, physics time on the EnergAIzer ResNet-101 rows moved from 1.33 to 1.14x too fast on the A10 and from
# 1.77 to 1.54x on the A100 (geometric mean of measured/physics time; bf16 rows at 900 MHz with the GPU busy over
# 85 % of the time).
LAYOUT_TRANSPOSE_OP = "nchw_to_nhwc"
# The transposes of a convolution's forward and backward (`train_step.backward` names the latter op + "_bwd"). Only a
# tensor-core kernel reads NHWC: where the GPU has no tensor cores for the convolution's dtype (fp32 on Volta, whose
# tensor cores take fp16 alone; bf16 on Volta), cuDNN's CUDA-core kernels read NCHW as it is and launch none
# (`physics._static_features` drops them there). ResNet-50's fp32 training step on a V100 spent 57 of its 425 ms of
# physics time in them, and read 1.26-1.28x slower than Zeus' epochs and NVIDIA's own FP32 figure for the card (367
# images a second, DeepLearningExamples' ConvNets README: 349 ms a batch of 128); without them, 368 ms.
LAYOUT_TRANSPOSE_OPS = (LAYOUT_TRANSPOSE_OP, LAYOUT_TRANSPOSE_OP + "_bwd")
# Kernels a library launches from C++ inside one dispatched call (cuDNN's transposes, a convolution's backward's too:
# `convolution_backward` is one ATen call): no host dispatch of their own.
LIBRARY_LAUNCHED_OPS = LAYOUT_TRANSPOSE_OPS
# Host dispatch and GPU work overlap only in part: within a layer some kernels outlast their dispatch and some do
# not, so neither side keeps its lead throughout. A workload takes the 2-norm of the two, not their maximum
# (assumption; EnergAIzer runs near the crossover take the host's time plus 30-50 % of the GPU's, e.g. BERT-large,
# batch 8, 256 tokens, A100 at 900 MHz: 23.5 ms against 12.1 ms of dispatch and about 19 ms of GPU work, taking the
# measured/physics ratio of its larger, GPU-bound runs). A workload of one kernel takes the maximum: launched again and
# again, the same side leads throughout (the H200's single-kernel loops, h200-first: physics time MAPE over its 46
# rows 19.5 -> 14.3 %, energy 15.2 -> 13.9 %, power 8.1 -> 7.0 %).
OVERLAP_NORM = 2.0
# A training step (forward, backward and optimizer kernels) in PyTorch eager mode costs its host more a launch than an
# inference pass: the forward records each op's autograd node and saved tensors, and the backward runs each node
# through the autograd engine. Its host and GPU also overlap nearer their maximum than a forward pass's: nothing in a
# step waits on the GPU, and the backward's GEMMs (twice the forward's FLOPs at as many launches) let the host run
# ahead. Both assumptions, set on the H200 collection's three training steps (data/measurements/h200/h200-first:
# GPT-2, Qwen2-1.5B, Llama-3-8B), the pair that read their time best on the grid 1.5-3 x 2-16 (experiments/
# training_host.py), and checked on its seven held-out ones (data/holdout: BERT-large, OPT-1.3B, GPT-2, Llama-3-8B,
# Mistral-7B, Qwen2-1.5B and -7B), physics energy / time / power MAPE 5.7 / 14.1 / 12.5 -> 5.3 / 10.2 / 8.3 % (the
# three 10.7 / 19.0 / 20.5 -> 7.4 / 9.6 / 7.3 %): at the inference pass's dispatch and 2-norm, physics read the
# host-bound steps (GPT-2 and BERT-large at batch 8) at 0.50 and 0.66 of their measured time, GPU-bound ones
# (Llama-3-8B at batch 2, Mistral-7B) at 1.10; now 0.76, 0.89 and 1.05. The shipped model retrained on the three so
# read: the H200's held-out rows (experiments/h200_holdout.py) 5.7 -> 5.5 % energy, power 7.5 -> 5.9 %. Set again
# (2.0 and 8 -> 2.5 and 16, the grid's pair again) when a streaming op's backward took the kernels autograd launches
# for it (`kinds.streaming.BACKWARD`), not two of every op's: the steps launch fewer kernels (GPT-2 at batch 8 on the
# H200: 661 -> 600), so each costs the host more; the collection's dispatch read again with it, 18.5 -> 18.0 us. The
# seven: 5.3 / 8.3 / 10.2 -> 7.4 / 8.2 / 9.7 % (the three: 7.4 / 7.3 / 9.6 -> 8.2 / 4.5 / 7.7 %).
TRAINING_DISPATCH_FACTOR = 2.5
TRAINING_OVERLAP_NORM = 16.0
# DRAM saturates once about half the SMs issue loads (assumption); fewer active SMs get proportionally less.
DRAM_SATURATING_SM_FRACTION = 0.5
# ... and once the SM clock is above 0.6 of its maximum: the requests the SMs keep in flight are bounded, and part
# of their latency is counted in SM cycles, so below that clock the bandwidth falls in proportion (Little's law).
# Assumption, set on the EnergAIzer A100 DVFS sweep (dvfs.csv, 510-1410 MHz): it flattens each workload's
# measured/physics time ratio across clocks (mean spread of its log 0.085 without, 0.064 with).
DRAM_SATURATING_CLOCK_RATIO = 0.6

# DVFS shape. Supply voltage relative to its maximum, from the EnergAIzer A100 table (dvfs__yz8__supply_voltage.json:
# 693.75 mV flat up to 1020 of 1410 MHz, rising to 893.75 mV at 1410), applied to every GPU as the default shape.
V_MIN_RATIO = 693.75 / 893.75
V_KNEE_CLOCK_RATIO = 1020.0 / 1410.0
# Idle power rises with voltage faster than V^2 f (leakage): idle(f) - idle_min ~ V^4 f reproduces the EnergAIzer
# A100 idle table (dvfs__yz8__idle_power.json) within 1.5 W between 210 and 1410 MHz.
IDLE_VOLTAGE_EXPONENT = 4.0
# Static power under load. The idle tables are read on a cool, idle die; a busy one draws more than its switching
# energy accounts for: static power idle(f) * (1 + ratio * u_sm). Not leakage from heat, mostly: on a lent H200 the
# die fell from 62 to 43 C within 0.4 s of a GEMM's end, and spinning at 1,980 MHz its power fell 0.72 W/K as it
# cooled to 38 C, 17 of the term's 79 W over the GEMM's 24 K (experiments/thermal_leakage.py, data/probes/h200/
# h200-thermal): the term follows load, and temperature follows power within a second. Nor SMs being on: one warp
# spinning on each of the 132 drew 11 W more than on one, against the term's 79 W, and 8 / 32 warps a SM 60 / 118 W
# more (experiments/busy_sm_power.py): it stands for power a busy kernel's issued work draws beyond the switching
# terms below, which is why it scales with SM activity and is fitted, not derived. The ratio is fitted on the
# GPUs with kernel-level rows' physics power (experiments/hot_static_power.py): 0.65 on all three; left out, each
# GPU's own is chosen by the other two (A10 0.7, A100-PCIe 0.65, H200 0.65) and scores physics power MAPE 24.8 -> 5.6
# % on the A10, 19.9 -> 6.2 % on the A100-PCIe and 13.1 -> 11.4 % on the H200 (energy 24.1 -> 7.9, 26.5 -> 12.3, 17.6
# -> 17.5 %). A term in the measured die temperature instead, k * idle(f) * (T - 25 C), fitted the same way, did
# worse on each (power 8.5 / 7.6 / 12.7 %) and needs a temperature no estimate has before its run. Under a power limit
# the term is what it is at the clock the cap leaves: a capped kernel draws what that clock locked would. Until
# 2026-12-06 it was scaled by limit / default, on the reasoning that a lower limit bounds the die's heat, which the
# H200's probes above found the term is not; on Zeus' power-limit sweeps (experiments/zeus_power_limits.py, BERT-base
# training at 100-250 W on the V100, 100-300 W on the A40) the scaling let a capped GEMM's clock rise, the V100's step
# at 100 W 1.48-1.50x its 250 W time against 1.88-2.07x measured, and 100 W picked as its best limit at every batch
# (measured 125-175 W): unscaled, with the A40's idle from its posted readings (data/gpus/a40.yaml), energy an epoch
# V100 12.9 -> 12.4 %, A40 11.4 -> 9.0 %, the energy against the highest limit's run within each batch 6.0-9.6 ->
# 4.1-7.6 % / 1.9-8.1 -> 2.8-7.5 % off, the V100's limit picked 125 W (6.9-13.1 -> 0-3.3 % more energy than the
# best). Every kernel-level row above was measured at its default limit, where nothing moves. Left at 0
# before issue 31, as the residual read worse with it, as it still does (leave-one-model-out, 3 tree seeds: A10
# 4.77 -> 4.70 %, A100 4.66 -> 5.05 %; issue 31's note). A smaller ratio trades one for the other: at 0.5, physics
# energy A10 10.1 %, A100-PCIe 14.7 %, and leave-one-model-out (tree seed 0) A10 4.72 %, A100 4.82 % (at 0.65: 4.63 /
# 4.99 %). Since a GEMM's DRAM traffic was read a wave of tiles at a time (2026-12-04, `kinds.gemm.traffic`) the fit
# picks 0.7, as does each GPU held out (power A10 25.9 -> 5.5 %, A100-PCIe 20.9 -> 5.8, H200 8.9 -> 7.0; energy 8.0 /
# 9.0 / 10.1 %); 0.65 stays, one step under: at 0.7 physics energy A10 8.34 -> 7.96 %, A100-PCIe 9.58 -> 8.98, H200
# 10.06 -> 10.14, but leave-one-model-out (3 tree seeds) A10 4.53 -> 4.65 %, A100 4.75 -> 4.76 %, seed 0 at 4.83 %,
# over issue 31's 4.8 %. Measured, not shipped (2026-12-04, on the traffic before): u_sm as the pass's mean rather
# than each kernel's, as a die's heat follows its work over many kernels. Weighted by the kernels' time, physics
# energy MAPE moves by at most 0.01 (H200 10.08 -> 10.07 %); by the pass's time, idle gaps included, A10 7.94 -> 6.67
# %, A100-PCIe 9.58 -> 10.67, A100-SXM4 5.97 -> 6.59, H100 3.87 -> 4.28, H200 10.08 -> 10.22; ML.ENERGY v3's J/token
# the same to 0.1 (serving_jobs.py).
HOT_STATIC_RATIO = 0.65

# Dynamic power at full utilisation and maximum clock/voltage, as fractions of (power limit - idle at max clock).
# Full-rate tensor work exceeds the limit (GPUs throttle on sustained dense GEMM: an H200 at 700 W settles at
# 1455-1470 MHz, gpus.md M[24]), hence a tensor coefficient that, with the SM term, exceeds 1.
POWER_COEFFICIENTS = {"tensor": 0.80, "fma": 0.50, "l2": 0.20, "sm": 0.35}
# Measured, not shipped (2026-12-03): the activity terms (FMA, L2, SM) of a die's budget rather than each card's,
# the budget of the card its coefficients were set on scaled by SMs (A100-SXM4 -> A100-PCIe's 183 W, A40 -> A10's 83 W
# x 84 / 72), the tensor term each card's own. Motive: on the Wilkins generations both A100 cards ran, the 400 W card
# drew a median 2.0 W more than the 250 W one on the 18 host-bound configurations, physics 49.0 W more
# (experiments/generation_jobs.py). Wilkins' A100-SXM4 energy MAPE, Mistral 13.2 / 13.5 -> 7.3 / 7.6 %, Llama-2 10.8 /
# 11.4 -> 11.1 / 10.5 %; Zeus' A40 (experiments/zeus_power_limits.py) absolute 33.1 -> 22.8 %, coverage 80.6 -> 87.5
# %, but its shape worse: energy against the highest limit 1.2-13.2 -> 5.4-15.0 % per batch, the limit picked 175 ->
# 150 W (measured best 175-200), regret 0-10.7 -> 5.1-30.5 %; vLLM 0.5.4's host power over ML.ENERGY v2's A100-SXM4
# rows 1.47 -> 1.76x idle where the H100's stay 1.47x (equal before); the model's cross-validated hybrid energy 5.89 ->
# 5.99 %.
# DRAM access energy, pJ per bit (O'Connor et al., "Fine-Grained DRAM", MICRO 2017: HBM2 3.9 pJ/bit, GDDR5 14.0;
# GDDR6 and HBM3/3e taken as 7.5 and 3.5 pJ/bit, assumptions).
DRAM_PJ_PER_BIT = {"HBM2": 3.9, "HBM2e": 3.9, "HBM3": 3.5, "HBM3e": 3.5, "GDDR6": 7.5, "GDDR6 ECC": 7.5}
