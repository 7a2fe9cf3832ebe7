"""The estimate reference: 500 configurations on five GPUs, estimated by physics and by the shipped hybrid, with
intervals and flags, saved before the estimate path was rewritten (issue 26) so that the new path is held to it;
saved again when the shipped model learned which kinds of work each GPU was trained on (issue 31: on the 1,084 rows
of a kind their GPU had no rows of, the intervals widened to span the pooled model's too and 735 rows became
out-of-domain; every point the same to 1e-9); and again when the bands took a quarter of the points' rounds (issue 26:
the shipped model's 12,000 trees a walk became 6,000; every point, flag and reason the same, bit for bit; interval
bounds moved by a median 0.5-2.3 %, at most 23 %; mean energy-interval width 93.6 -> 92.8 % of the estimate); and
again when the H100-SXM took its measured DVFS idle table (issue 31: its physics energy up a median 1.3 %, at most
12.9 % at 1,600-1,900 MHz, every other GPU's the same; the model retrained on it, hybrid estimates moved a median
0.6-2.0 % by GPU, at most 15 %; every flag and domain reason the same); and again when the H200's collections
stated their machine's host dispatch (issue 31: 18 us a launch against the default 25, so the H200's learned level
no longer holds its host's speed; the model retrained on it, whose grid then chose depth 3 and 300 rounds over depth
4 and 400; physics the same everywhere, hybrid energy moved a median 1.3-2.3 % by GPU on the others and 5.6 % on the
H200, whose time rose a median 12.9 %; every flag and domain reason the same); and again when a GPU of an
architecture the model was not trained on took physics' point (issue 31: the L40S, Ada, alone moved: hybrid energy a
median -18.3 %, -30.7 to +4.3 %, time +2.1 %, -12.4 to +22.2 %; each interval spans the old one's point, mean energy
width 74 -> 107 % of the estimate; each row's reasons add its architecture; flags the same; physics the same
everywhere, the bf16 emulation on Volta touching no GPU here); and again when physics took a static power that rises
under load, scaled by a lowered power limit over the default, and a GPU's level stopped carrying to kinds of work it
has no rows of (issue 31: physics energy up a median 9.7-17.0 % by GPU, -4.4 to +39.0 %; vLLM 0.5.4's host time
re-measured on that physics, 0.451 ms at 1.88x idle; the model retrained; the 1,084 rows of another kind on their
GPU and the L40S's 500 now read at physics' point, hybrid energy a median +35.3 % on the H100 (its serving level,
-0.16, no longer applied), +3.8 % A10, -13.6 % A100-PCIe, -0.6 % H200, +12.0 % L40S; the other rows -0.3 to +10.9 %;
mean energy width 96.2 -> 89.4 % of the estimate; flags the same, and each row's reasons the same but for the note
that names the rule); and again when the A100 took its measured tensor GEMM efficiency, 0.869 of its peak (issue 31:
physics on the A100-PCIe up a median 0.2 % in energy, at most 4.8 %, and 0.1 % in time, at most 6.1 %, every other
GPU's the same; the model retrained, hybrid energy a median 0.0-0.1 % by GPU, -5.6 to +4.3 %; mean energy width 89.4
-> 88.0 % of the estimate; flags the same, the domain reasons of 22 rows changed with the retrained model's ranges);
and again when the H200's collected GPT-2 rows named the runner's one-kernel activation, the collection's host
dispatch was read again on them (18.5 us a launch), vLLM 0.5.4's host time on the A100's new physics (0.447 ms at
1.85x idle) and the grid fitted the cheapest entry within one standard error of the best (issue 31: physics the same
but for the rows served by vLLM 0.5.4, -1.5 to -2.1 %; the model retrained, depth 3 and 300 rounds still; hybrid
energy a median +1.9 % on the H200, -3.5 to +25.4 %, and 0.0 % on the others, -5.1 to +6.5 %; mean energy width 88.0
-> 89.5 %; every flag and domain reason the same); and again when fused attention paid for each CTA's prologue
against its key blocks (issue 31: physics moved on the 728 flash-attention rows alone, energy at most +6.7 % A10,
+17.5 % A100-PCIe, +4.4 % H100, +10.6 % H200, +2.0 % L40S; the model retrained, depth 3 and 300 rounds still, its
H200 upper energy margin 0.34 -> 0.13; hybrid energy -4.6 to +17.5 %, a median 0.0 % on every GPU; mean energy width
89.5 -> 77.4 % of the estimate, the H200's 134.5 -> 84.2 %; every flag and domain reason the same). A GPU not
trained on, of an architecture trained on, running work without a serving engine with its features in range, takes
the margin measured for a new GPU unwidened (issue 31); the one GPU here not trained on, the L40S, is of another
(Ada), so nothing here moved. Saved again when the power limit was held over a pass's average, so that its idle
gaps (host dispatch, an engine's host work) leave its kernels headroom over the limit (issue 31: physics moved on the
916 rows with gaps and a kernel over the limit, energy -2.7 to +21.0 %, a median 0.0 % on every GPU, time down at
most 9.2 %; the model retrained, depth 3 and 300 rounds still; hybrid energy a median -0.4 % on the H200 and 0.0 % on
the others, -10.2 to +21.0 %; mean energy width 77.4 -> 77.9 % of the estimate; every flag the same, one row's
domain reason naming a convolution share 0.001 lower). Saved again when an engine's host work drew at most the power
limit (three A10 rows at 120 W served by vLLM 0.5.4, whose 1.85x idle is 124.9 W: energy -0.1 to -1.9 %, time and
every other number, flag and reason the same). Saved again when a GEMM tile over an edge loaded only the rows and
columns there are and a workload whose whole DRAM traffic fits in L2 found it there on its next run (issue 31: physics
energy -1.6 to 0.0 %, time -1.3 to 0.0 %, on 1,535 and 514 rows, a median 0.0 % on every GPU; no configuration here
fits in L2; the model retrained, hybrid energy -4.6 to +4.8 %, a median +0.5 % on the H200 and 0.0 % on the others;
mean energy width 77.9 -> 75.8 % of the estimate; every flag and domain reason the same). Saved again when, where the
model has not learned the GPU on the kind of work, the interval was moved to physics' point rather than spanning its
old place too, with the new-GPU margin measured there (issue 31: every point the same; mean energy width 75.8 -> 73.1
% of the estimate, A100-PCIe 59.4 -> 52.7 %, L40S 79.1 -> 74.9 %; every flag the same; 1,584 rows' reasons now say
"moved to it"). Saved again when a workload of one kernel took the longer of its GPU time and its dispatch (issue 31:
physics the same, no configuration here being one kernel; the model retrained on the H200's single-kernel rows,
hybrid energy on the H200 -5.4 to +7.7 %, a median +0.5 %, time a median +4.6 %, the others' the same; mean energy
width 73.1 -> 71.1 %; every flag and reason the same). Saved again when ML.ENERGY v2's rows were trained as serving
steps carrying their arriving prompts (an assumed 128 tokens) and vLLM 0.5.4's host work re-measured over them, 0.395
ms at 1.47x idle (issue 27: physics moved on the 160 rows that engine serves, energy -24.9 to 0.0 %, time -10.6 to
0.0 %; the model retrained, with a new GPU's margin measured per kind of work; the other rows' hybrid energy -4.7 to
+3.9 %, a median 0.0 % but -0.2 % on the H200; mean energy width 71.1 -> 65.7 %, the H100's 100.6 -> 85.0 %; every
flag and reason the same). Saved again when a kind of work that fewer than two GPUs ran took the widest of the
measured new-GPU margins (issue 31: the 741 decode and training rows on a GPU without rows of that kind moved, their
intervals wider; every point, flag and reason the same; mean energy width 65.7 -> 68.8 %). Saved again when a serving
step's prompt tokens ran through the decodes' kernels rather than through kernels of their own beside them, all but
attention (issue 27: vLLM 0.5.4's host work re-measured over the new steps, 0.406 ms at 1.48x idle; physics moved on
the 160 rows that engine serves, energy 0.0 to +2.7 %; the model retrained, hybrid energy a median 0.0 % on every GPU
but +0.1 % on the H200, -4.8 to +4.1 %; mean energy width 64.1 -> 63.7 %; every flag and reason the same).
Saved again when an estimate whose machine states no host dispatch took the measured hosts' range into its interval
(issue 27: the 1,831 rows of eager launches, their lower energy bound a median 0.5 % lower, at most 23.5 %, their
upper a median 0.5 % higher, at most 18.2 %; mean energy width 63.7 -> 69.2 % of the estimate; every point, flag and
reason the same).
Saved again when the A100-PCIe took its own card's matmul rate (0.811 of its peak, not the SXM4's 0.869) and the
residual a level per GPU and operand width (issue 31: physics on the A100-PCIe's 333 tensor-core rows up at most 4.9 %
in energy and 6.3 % in time, every other GPU's the same; the model retrained, hybrid energy a median 0.0 % on every
GPU but +0.1 % on the A100-PCIe, -8.9 to +8.9 %; mean energy width 69.2 -> 67.2 % of the estimate; every flag the
same; 22 rows' domain reasons name the retrained model's convolution share range, 0.573 for 0.571). Saved again when
a softmax too wide for ATen's persistent kernel issued 1.5x its instructions an element (issue 31: physics energy up
on the 163 eager rows with such rows, at most 12.2 %, the others the same; the model retrained, hybrid energy -6.4 to
+10.4 %, a median 0.0 % on every GPU but +0.1 % on the H200; mean energy width 67.2 -> 64.0 % of the estimate;
every flag and reason the same). Saved again when a GEMM's DRAM traffic was read a wave of tiles at a time
where neither operand fits in L2, not one operand in full for each L2-sized chunk of the other (issues 27 and 31:
physics time on the 689 rows that moved a median -0.8 %, -93.5 to +0.9 %, energy on 1,030 a median -0.6 %, -93.3 to
+2.1 %, the large drops training steps whose weight and LM-head gradients stream a long K; the model retrained,
hybrid energy a median -0.3 %, -93.3 to +4.2 %; mean energy width 64.0 -> 63.2 % of the estimate; every flag and
reason the same). Saved again when work a GPU has no rows of took the physics margin of its architecture's GPUs at
that kind, where they ran 30 rows or more (issue 31): the H100's 208 forward rows (trained on serving steps only)
take the H200's forward margin, energy 0.207 -> 0.272 each way, their bounds 6.2-6.6 % further out (at most 13.7 %
where widened); mean energy width 63.2 -> 64.7 % of the estimate, the H100's 62.1 -> 69.5 %; every point, flag and
reason the same. Saved again when a power limit bounded the domain through the clock physics' cap solve leaves the
kernels (`busy_clock_ratio` against the clocks trained on), not the limit's ratio to the default, trained at 1 alone:
none of the 645 estimates at 0.8 of the default limit is flagged for it now, 214 of them are in the domain (48 A10,
49 A100-PCIe, 8 H100, 109 H200), and 467 intervals are no longer widened twofold (their bounds 8-31 % closer in);
mean energy width 64.7 -> 56.6 % of the estimate; every point the same. Saved again when work the model has not
learned, on a GPU of an architecture trained on with a feature out of range, took its physics margin widened 1.5x,
not 2x (`UNLEARNED_WIDEN`; issue 31): 96 rows' bounds moved in (87 training steps, 9 prefills; 38 H100, 29
A10, 29 A100-PCIe), their mean energy width 88.0 -> 65.1 % of the estimate, all rows' 56.6 -> 55.7 %; every point,
flag and reason the same. Saved again when a GPU of an architecture not trained on took that 1.5x too, not 2x (issue
27): the L40S's 500 rows alone moved, their mean energy width 86.0 -> 64.5 %, all rows' 55.7 -> 51.4 %; every point,
flag and reason the same. Saved again when a training step's launches took autograd's host time (twice an inference
pass's) and its host and GPU overlapped by an 8-norm, not a 2-norm (issue 31): physics moved on the 780 training
rows alone, time -5.3 to +97.8 % (host-bound steps of small models up, GPU-bound ones a little down), energy -4.5
to +87.6 %, a median 0.0 %; the model retrained on the H200's steps so read, hybrid energy on the other rows -3.3
to +2.6 %, a median 0.0 %; mean energy width 51.4 -> 51.8 %; every flag and reason the same. Saved again when the
model trained on 24 more H200 prefill rows (data/measurements/h200/h200-prefill; issue 31): physics the same
everywhere; hybrid energy on the H200 a median -0.9 %, -8.4 to +3.3 %, time a median -1.0 %; elsewhere a median
0.0 %, -6.4 to +3.1 %; the L40S the same; mean energy width 51.8 -> 50.6 %; every flag and reason the same.
Saved again when an elementwise op with a broadcast operand (a 0-d divisor, a causal where, an attention mask over
every head) issued ATen's unrolled loop, 0.632 SM cycles an element, and the model trained on the H200's 48 eager rows
(data/measurements/h200/h200-eager, h200-masked; issue 31): physics moved on 314 eager rows alone, energy a median
+0.3 %, at most +28.5 % (H200) / +19.0 % (H100) / +9.8 % (A100-PCIe) / +0.7 % (A10), time at most +53.1 %; hybrid
energy a median +2.6 % on the H200 (-4.9 to +32.1 %) and 0.0 % elsewhere (-8.4 to +19.0 %); Hopper's forward passes
now trained on eager kernel mixes, 123 H100 rows' reasons name fewer shares out of range and their intervals widen
less; mean energy width 51.7 -> 47.3 % of the estimate; every flag the same.
Saved again when a streaming op's backward took the kernels autograd launches for it, not two of every op's (none
for an attention mask added, one for an activation, a softmax, a copy or an add of two tensors), and a training
step's host its refitted 2.5x dispatch and 16-norm (issue 27): physics moved on the 970 training rows alone, energy a
median -3.0 %, -29.7 to +10.9 %, time -2.4 %, -31.3 to +13.5 %; the model retrained on the H200's rows so read (its
collection's dispatch read again, 18.5 -> 18.0 us, and with it the low end of the measured hosts' range that an
unstated host's interval spans), hybrid energy on the other rows a median 0.0 %, -2.6 to +3.8 %; mean energy width
47.3 -> 48.1 %; every flag the same, and five L40S rows' reasons the same but for the conv share they name.
Saved again when fused attention's backward did 2.5x its forward's FLOPs, not 2x (Dao 2023; issue 27): physics moved
on 370 training rows with fused attention alone, energy at most +6.6 % (time the same); the model retrained, hybrid
energy on the other rows a median 0.0 %, -2.5 to +2.4 %; mean energy width 48.1 -> 47.9 %; every flag and reason
the same.
Saved again when an engine's host work a running sequence spread its interval over the rows it was measured from
(vLLM 0.5.4: 0.335-0.571 ms about its 0.406; issue 27): every point, flag and reason the same, bit for bit; the 160
rows served by vLLM 0.5.4 alone moved their bounds, energy's low a median -1.3 % (at most -13.8 %), its high +3.1 %
(at most +32.0 %); mean energy width 47.9 -> 48.5 %.
Saved again when the static term under load stopped being scaled by a lowered power limit over the default (a capped
kernel at a clock draws what that clock locked would; issue 27): the 645 rows with a limit below their GPU's default
alone moved, physics energy up a median 2.25 % (at most 13.3 %), hybrid time up a median 0.8 % on the 378 whose cap
now leaves a lower clock; the model the same; every flag the same, two rows' domain reasons changed with their clock.
Saved again when an unstated host's range and an engine's measured host work joined the interval's own reach in
quadrature, not added to its bounds (issues 27 and 31, `estimator.api.SPREADS_IN_QUADRATURE`): every point, flag
and reason the same, bit for bit; the 1,707 rows such a range reaches moved their bounds in, energy's low a median
+2.4 % (at most +27.0 %), its high -0.4 % (at most -12.8 %); mean energy width 48.5 -> 44.5 % of the estimate.
Saved again when the model's conformal margins were calibrated on the interval an estimate gives, an unstated host's
reach joined (issue 31, `training.residual.CONFORMAL_ON_JOINED`; the model retrained, its trees the same): every
point, flag and reason the same, bit for bit; 1,696 rows' bounds moved in, energy's low a median +0.7 % (at most
+7.6 %), its high -0.7 % (at most -6.8 %); mean energy width 44.5 -> 43.2 % of the estimate.
Saved again when a training step's activations stopped counting the outputs autograd keeps none of, cuDNN's layout
transposes and a ReLU's beside its input (`features.memory._NOT_SAVED_OPS`): every energy, time, interval and reason
the same, bit for bit; the memory of 410 training rows down, ResNet-101 a median 32.3 % (12.2-40.7 %), MobileViT 9.0
%, OPT-1.3B 5.6 % (at most 20.0 %), ViT-L under 0.1 %; two OPT-1.3B rows no longer flagged exceeds-memory.
Saved again when cuDNN's layout transposes in a convolution's backward were taken as launched inside its one call,
as the forward's are (`features.arch.LIBRARY_LAUNCHED_OPS`; the same change dropped them where a convolution runs on
CUDA cores, which no GPU here does): the 253 vision training rows alone moved, for two host launches fewer a
convolution; physics and hybrid time a median -6.7 % (at most -18.8 %), energy a median -3.8 / -3.4 % (at most
-17.1 %); mean energy width 43.2 -> 43.1 % of the estimate; every flag and reason the same.
Saved again when a kind of work fewer than two GPUs trained on ran (decode and training steps: the H200's alone) was
widened as work unlearned (`estimator.residual.UNLEARNED_WIDEN`, `Residual.kind_measured`; issues 27 and 31): every
point and flag the same, bit for bit; the 693 decode and training rows of the A10, A100-PCIe and H100 moved their
bounds out, energy's low -8.5 %, its high +9.3 %; mean energy width 43.1 -> 47.8 % of the estimate; 1,040 rows' reasons
add the kind's note (the L40S's, widened already as an architecture not trained on, too).

"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
REFERENCE = HERE / "estimates.parquet"
# Trained on (A10, A100-PCIe, H100-SXM, H200) and one the shipped model never saw (L40S: spec-only).
GPUS = ("a10", "a100-pcie-40gb", "h100-sxm", "h200", "l40s")
_LANGUAGE = ("gpt2", "bert-large", "opt-1.3b", "qwen2-1.5b", "llama-3-8b", "mistral-7b", "qwen2-7b", "llama-3-70b")
_VISION = ("vit-large", "resnet-101", "mobilevit-small")


def configurations(n: int = 500, seed: int = 26) -> pd.DataFrame:
    """`n` workload configurations drawn at random (model, phase, batch, sequence, dtype, attention, launch mode,
    engine, clock and power limit as fractions of the GPU's), each later estimated on every GPU of GPUS."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        model = str(rng.choice(_LANGUAGE + _VISION))
        if model in _VISION:
            phase = str(rng.choice(["inference", "training"]))
        elif model == "bert-large":
            phase = str(rng.choice(["prefill", "training"]))
        else:
            phase = str(rng.choice(["prefill", "decode", "training"]))
        served = phase == "decode" and rng.random() < 0.3
        rows.append(dict(
            model=model, phase=phase, batch=int(rng.choice([1, 2, 4, 8, 16, 32, 64, 128])),
            seq=int(rng.choice([64, 128, 197, 256, 384, 512, 1000, 1024, 2048, 4096])),
            dtype=str(rng.choice(["bf16", "fp16", "fp32"])), attention=str(rng.choice(["flash", "eager"])),
            launch_mode="graph" if served or rng.random() < 0.2 else "eager",
            engine="vllm-0.5.4" if served else "",
            clock_fraction=float(rng.choice([np.nan, np.nan, 0.7, 0.85])),
            limit_fraction=float(rng.choice([np.nan, np.nan, np.nan, 0.8]))))
    return pd.DataFrame(rows)


def grid(configs: pd.DataFrame) -> pd.DataFrame:
    """Every configuration on every GPU, with the clock and power limit as numbers (NaN: the GPU's default)."""
    import joulecast

    frames = []
    for name in GPUS:
        spec = joulecast.gpu(name)
        frames.append(configs.assign(
            gpu=name, sm_clock_mhz=np.round(configs["clock_fraction"] * spec.boost_clock_mhz),
            power_limit_w=np.round(configs["limit_fraction"] * spec.power_limit_w)))
    return pd.concat(frames, ignore_index=True).drop(columns=["clock_fraction", "limit_fraction"])


COLUMNS = ("physics_time_s", "physics_energy_j", "time_s", "energy_j", "power_w", "energy_lo_j", "energy_hi_j",
           "time_lo_s", "time_hi_s", "in_domain", "flags", "outside_domain")
NEWER = ("memory_gb",)  # columns the estimate gained after the reference was saved


def estimates(frame: pd.DataFrame) -> pd.DataFrame:
    """Physics and hybrid estimates (shipped model) of configurations on GPUs (`grid`), side by side."""
    import joulecast

    hybrid = joulecast.estimate_many(frame)
    physics = joulecast.estimate_many(frame, estimator="physics")
    out = frame.copy()
    for column in COLUMNS + tuple(c for c in NEWER if c in hybrid):
        out[f"hybrid_{column}"] = hybrid[column].to_numpy()
    for column in ("time_s", "energy_j"):
        out[f"physics_only_{column}"] = physics[column].to_numpy()
    return out


if __name__ == "__main__":
    table = estimates(grid(configurations()))
    table.to_parquet(REFERENCE, index=False)
    print(f"{len(table)} rows -> {REFERENCE}")
