"""`plan`: a training job over many GPUs and sites, one result per strategy (data-parallel, FSDP, DiLoCo, Streaming
DiLoCo, federated averaging): time to finish, energy split, carbon, bytes per link, compute utilisation.

Method (formulas: shared/reference/distributed.md, section 0; every constant in data/distributed/*.yaml):
1. Each site's GPUs are replicas of the job's layout (TP x PP x CP GPUs each); the global batch is split evenly over
   all replicas, so each replica's step is `train_run.step_estimate` (physics x learned residual) with its share, plus
   the pipeline bubble (pp - 1) / (vpp x micro-batches) (1F1B, Narayanan et al. 2021), and the framework's own time
   where the job gives one (`forward_overhead_s` a layer and forward pass, at the micro-step's power).
2. Collectives by an alpha-beta model per link class (`features.collectives`): tensor-parallel all-reduces of
   activations (4 a layer and micro-batch), context-parallel key/value passes and pipeline sends, overlapped with
   compute where frameworks overlap them (`tp_overlap`, ring attention, NeMo's p2p overlap); the data-parallel
   gradient all-reduce within a site, then across sites over the slowest inter-site link, overlapped with the last
   micro-batch's backward (2/3 of its time). FSDP moves 1.5x DDP's bytes (ZeRO-3) overlapped with the whole step.
   DiLoCo all-reduces outer gradients of `bits` every H steps, blocking; Streaming DiLoCo sends P fragments, each
   allowed tau steps to finish; federated averaging sends the model to and from a server every H local steps.
2b. Stragglers: where the job gives `step_jitter` (the coefficient of variation of a rank's micro-batch time), every
   synchronous step waits for its latest rank: a host pause on one rank, such as Python's automatic garbage
   collection, holds every other rank at the next collective (NeMo-RL's `manual_gc` documentation; torchtitan PR
   #148 measured 1.5 % a step on 512 GPUs from aligning collections; Perseus, SOSP'24, calls the waiting
   "extrinsic energy bloat"). With micro-batch delays independent and normal, a step of A micro-batches is late by
   jitter x step / sqrt(A) x E[max of n standard normals] over the n GPUs it synchronises (all of the job's for DDP
   and FSDP, an island's for the others); the other ranks wait that long at waiting power.
3. Energy per site: PUE x [GPUs x (busy power x compute time + waiting power x waiting time) + nodes x (host + switch
   power) x wall time + bits moved x energy per bit]; the allocational internet kWh/GB is reported apart. The
   waiting power is the site's `wait_w`, by default the catalog's idle power at maximum clocks. No source measures
   a GPU blocked in a collective; on a lent H200 (`data/probes/h200/h200-waiting`, 2026-12-04) a kernel spinning
   on one block, as NCCL's poll a flag, drew 119.7-120.2 W and a held context with no kernel 119.4-119.5 W, both at
   1,980 MHz, against the catalog's 122 W (-2 %).
4. Carbon: grid energy (what local energy, e.g. solar, does not meet) x the site's intensity, hour by hour where
   the site gives a series.
5. Evaluation: each of the job's `evals` evaluations runs its share of `eval_tokens` in whole global batches,
   forward only, pausing training, and waits out `eval_overhead_s` (the framework's switch into validation and
   back); the warm-up (`startup_s`) pauses it too. The GPUs wait through both.
6. Failures: a synchronous job (DDP, FSDP) stops for every island's failure (restart plus half a checkpoint
   interval lost); a DiLoCo-style island loses half its outer round and its restart while the others go on.
Interval: the GPU compute's interval from the estimator (comonotone over steps), and +-20 % on the terms that are
reference data rather than model (host, switch, waiting power, network): a stated band, not a fitted one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from joulecast.data.errors import InputError, require, require_choice
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.files import kind_of
from joulecast.data.job_file import (
    AXIS_BOUNDS,
    STRATEGIES,
    Job,
    Site,
    check_bits,
    check_number,
    connected,
    load_job,
    reference,
)
from joulecast.data.models import head_count, hidden_size, layer_count
from joulecast.data.workload import AUTO_MICRO_BATCH
from joulecast.estimator.loading import load_estimator
from joulecast.estimator.train_run import Layout, StepEstimate, largest_fitting, step_estimate, vision_step
from joulecast.features import collectives
from joulecast.features.lowering import is_vision, refuse_idle_fusions, resolve_model
from joulecast.features.physics import check_setting
from joulecast.features.power import waiting_power_w

if TYPE_CHECKING:
    import pandas as pd

_DATA_BAND = 0.20           # the stated +-band of the reference-data terms (see the module's docstring)
_BACKWARD_SHARE = 2.0 / 3.0  # a step's backward share of its compute (Douillard's simulator, distributed.md section 2)
_FSDP_VOLUME = 1.5          # ZeRO-3: all-gather forward + all-gather backward + reduce-scatter, 3N against DDP's 2N
_J_PER_KWH = 3.6e6


@functools.lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for one): the integral of x d/dx Phi(x)^n, on a fine grid."""
    if n <= 1:
        return 0.0
    x = np.linspace(-9.0, 9.0, 18_001)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    density = n * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * cdf ** (n - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))


def _lateness_s(job: Job, sites: list["SiteCompute"], ranks: int | list[int]) -> np.ndarray:
    """Each site's expected wait for the latest of `ranks` GPUs a step (method 2b), seconds."""
    counts = np.broadcast_to(np.asarray(ranks), (len(sites),))
    return np.array([job.step_jitter * (s.compute_s - s.bubble_s) / math.sqrt(s.step.accumulation)
                     * expected_max_normal(int(n)) for s, n in zip(sites, counts)])


@dataclass(frozen=True, slots=True)
class SiteCompute:
    """One site's replicas: their step estimate and their share of the work."""

    site: Site
    replicas: int
    step: StepEstimate
    compute_s: float            # one step's compute with its pipeline bubble
    bubble_s: float
    busy_w: float               # GPU power while computing
    wait_w: float               # GPU power while waiting on communication
    intra_exposed_s: float      # TP/CP/PP communication not hidden by compute, per step
    intra_bytes: float          # bytes a GPU sends within its replica per step
    intra_pj_per_bit: float
    eval_s: float               # the job's evaluation passes (forward only), all of them, on every GPU
    eval_j: float               # their GPU energy, per GPU
    overhead_s: float           # a step's framework overhead (`Job.forward_overhead_s`), within compute_s
    dp_bytes: float             # gradient bytes a GPU holds (its shard's trainable parameters)
    dp_link: dict[str, float]   # the site's data-parallel link: gbytes_per_s, latency_us, pj_per_bit
    micro_batch: int = 1        # the site's micro-batch (its own, where the job's is AUTO_MICRO_BATCH)
    input_floor_s: float = 0.0  # a replica's input pipeline's time for its share of a global step (`Job.loader_rate`)
    eval_floor_s: float = 0.0   # and for every evaluation global batch of the job, together


def _link(name: str) -> dict[str, float]:
    return dict(reference("links")[name])


def site_compute(job: Job, estimator: Any = None) -> list[SiteCompute]:
    """Step estimates for each site (one per GPU type and share), checked against GPU memory."""
    lay = job.layout
    per_replica = lay["tp"] * lay["pp"] * lay["cp"]
    replicas = [s.gpus // per_replica for s in job.sites]
    total = sum(replicas)
    auto = job.micro_batch == AUTO_MICRO_BATCH  # each site the largest micro-batch that fits its GPUs
    split = 1 if auto else job.micro_batch
    require(job.global_batch % (total * split) == 0, "global_batch",
            f"{job.global_batch} {'images' if job.unit == 'image' else 'sequences'} do not split into {total} "
            f"replicas" + ("" if auto else f" x micro-batches of {split}"))
    share = job.global_batch // total  # a replica's sequences a step
    config = resolve_model(job.model)[0]  # any model: a vision model's plan is data-parallel (its job file checks)
    if job.fusions:  # one that changes none of the model's kernels refused, as `estimate` refuses it
        refuse_idle_fusions(model=job.model, phase="training", batch=split, seq=job.seq, dtype=job.dtype,
                            fusions=list(job.fusions))
    images = is_vision(config)  # data-parallel over images (the job file checks its layout): no activations sent
    if images:  # no tensor, context or pipeline parallelism: nothing sent within a replica
        hidden = layers = kv_heads = head_dim = 0
    else:
        hidden, layers = hidden_size(config), layer_count(config)
        heads = head_count(config)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
    model = estimator if hasattr(estimator, "predict") else load_estimator(estimator or job.estimator)
    out = []
    for i, (site, r) in enumerate(zip(job.sites, replicas)):
        layout = Layout(tp=lay["tp"], pp=lay["pp"], cp=lay["cp"], dp=r, zero=lay["zero"])
        spec = lookup_gpu(site.gpu)
        try:  # the site's clock and power limit, checked against its GPU: named as the job file's fields
            check_setting(spec, site.sm_clock_mhz, site.power_limit_w)
        except InputError as exc:
            raise InputError(f"sites[{i}].{exc.field}", str(exc).split(": ", 1)[-1]) from None
        setting = dict(dtype=job.dtype, optimizer=job.optimizer, sm_clock_mhz=site.sm_clock_mhz,
                       power_limit_w=site.power_limit_w, estimator=model if model is not None else "physics",
                       launch_mode=job.launch_mode, fusions=job.fusions, host_dispatch_s=site.host_dispatch_s,
                       with_forward=job.eval_tokens > 0)

        def step_of(micro: int, under: Layout = layout, recompute: str = job.recompute,
                    **other: Any) -> StepEstimate:  # a step of the replica's share in micro-batches of `micro`
            if images:  # each GPU a whole replica: its step is a one-GPU run's (`train_run`)
                return vision_step(config, job.model_name, site.gpu, attention="flash", micro_batch=micro,
                                   accumulation=share // micro, **setting)
            return step_estimate(job.model, site.gpu, seq=job.seq, lora_rank=job.lora_rank,
                                 lora_targets=job.lora_targets, recompute=recompute, layout=under,
                                 fp8_attention=job.fp8_attention, head_tokens=job.head_tokens,
                                 head_outputs=job.head_outputs, forward_overhead_s=job.forward_overhead_s,
                                 micro_batch=micro, accumulation=share // micro, **{**setting, **other})

        step = step_of(share if auto else split)
        if auto and step.memory_gb > spec.memory_gb:  # the largest that fits: the fewest accumulated
            step = largest_fitting(step, step_of, spec.memory_gb, share, job.seq, job.recompute) or step_of(1)
        micro = share // step.accumulation
        accumulation = step.accumulation
        if step.memory_gb > spec.memory_gb:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in step.memory_parts_gb.items())
            fits = [] if images else _what_fits(job, site, spec, micro, lambda under, recompute: step_of(
                micro, under, recompute, estimator="physics"))  # memory alone: physics' steps
            how = ("a GPU with more memory" if images and auto else "lower micro_batch" if images
                   else f"{' or '.join(fits)} would fit" if fits else
                   "raise TP or PP, use ZeRO (layout.zero) or recompute")
            raise InputError(f"sites[{i}].gpu", f"the model does not fit under layout TP {lay['tp']} x PP {lay['pp']} "
                             f"x CP {lay['cp']}, ZeRO {lay['zero']}: {step.memory_gb:.1f} GiB a GPU ({parts}) on a "
                             f"{spec.memory_gb:g} GB "
                             f"{spec.name}" + (f" at one {'image' if images else 'sequence'} a micro-batch" if auto
                                               else "") + f"; {how}")
        bubble = step.time_s * (lay["pp"] - 1) / (lay["vpp"] * accumulation) if lay["pp"] > 1 else 0.0
        tokens = micro * job.seq // lay["cp"]
        act_bytes = 2.0  # activations exchanged in 16-bit
        layers_stage = -(-layers // lay["pp"])
        intra_link = _link(site.intra)
        inter_link = _link(site.inter_node)
        passes = 4 + (2 if job.recompute == "full" else 0)   # forward 2, backward 2 (+ recomputed forward)
        tp_link = intra_link if lay["tp"] <= site.gpus_per_node else inter_link
        tp_bytes = passes * layers_stage * accumulation * collectives.sent_bytes(
            "all-reduce", lay["tp"], tokens * hidden * act_bytes)
        tp_s = passes * layers_stage * accumulation * collectives.time_s(
            "all-reduce", lay["tp"], tokens * hidden * act_bytes, tp_link["gbytes_per_s"], tp_link["latency_us"])
        cp_link = intra_link if lay["tp"] * lay["cp"] <= site.gpus_per_node else inter_link
        kv_bytes = 2 * tokens * max(1, kv_heads // lay["tp"]) * head_dim * act_bytes
        cp_bytes = 3 * layers_stage * accumulation * (lay["cp"] - 1) * kv_bytes  # forward once, backward twice
        cp_s = cp_bytes / (cp_link["gbytes_per_s"] * 1e9) if lay["cp"] > 1 else 0.0
        pp_link = intra_link if per_replica <= site.gpus_per_node else inter_link
        pp_bytes = 2 * accumulation * tokens * hidden * act_bytes if lay["pp"] > 1 else 0.0
        pp_s = pp_bytes / (pp_link["gbytes_per_s"] * 1e9)
        # ring attention and NeMo's p2p overlap hide CP and PP traffic under compute; TP only with tp_overlap
        hidden_under = step.time_s
        exposed = (max(0.0, tp_s - hidden_under) if job.tp_overlap else tp_s) + max(0.0, cp_s + pp_s - hidden_under)
        pj = (tp_bytes * tp_link["pj_per_bit"] + cp_bytes * cp_link["pj_per_bit"] + pp_bytes * pp_link["pj_per_bit"])
        intra_bytes = tp_bytes + cp_bytes + pp_bytes
        dp_link = intra_link if per_replica * r <= site.gpus_per_node else inter_link
        grad_width = 4.0 if job.dtype in ("fp32", "tf32") else 2.0
        # evaluation: the job's eval tokens in forward passes of micro-batches, spread over all replicas; a pipeline
        # fills and drains once an evaluation step, of as many micro-batches as a training step (NeMo and Megatron
        # evaluate in global batches of the training's size). Each evaluation runs whole global batches: its last,
        # partial one takes a full one's time (the replicas with no sequence left wait for it), charged as busy
        passes_eval = job.evals * eval_steps(job) * accumulation
        forward = step.forward
        # each evaluation forward waits out the framework's overhead too (`StepEstimate.overhead_s`), at its power
        eval_s = passes_eval * (forward.time_s + step.overhead_s) * (
            1 + (lay["pp"] - 1) / (lay["vpp"] * accumulation)) if forward else 0.0
        eval_j = passes_eval * forward.energy_j * (1 + step.overhead_s / forward.time_s) if forward else 0.0
        # a replica's input pipeline (`Job.loader_rate`) prepares its share of the next global batch meanwhile: a
        # step takes at least that long (`evaluate`), an evaluation batch too, the GPUs waiting at their waiting power
        input_floor = share / job.loader_rate if job.loader_rate else 0.0
        wait_w = site.wait_w if site.wait_w is not None else waiting_power_w(spec, site.sm_clock_mhz)
        eval_floor = job.evals * eval_steps(job) * input_floor if forward else 0.0
        out.append(SiteCompute(
            site=site, replicas=r, step=step, eval_s=eval_s, eval_j=eval_j,
            overhead_s=step.accumulation * step.forwards * step.overhead_s, compute_s=step.time_s + bubble,
            bubble_s=bubble, busy_w=step.energy_j / step.time_s, wait_w=wait_w,
            intra_exposed_s=exposed, intra_bytes=intra_bytes,
            intra_pj_per_bit=pj / intra_bytes if intra_bytes else 0.0,
            dp_bytes=step.trainable * grad_width, dp_link=dp_link, micro_batch=micro, input_floor_s=input_floor,
            eval_floor_s=eval_floor))
    return out


# How many ways to fit a site that its job's layout does not, a memory refusal names at most (`_what_fits`)
FIT_HINTS = 3


def _what_fits(job: Job, site: Site, spec: Any, micro: int,
               step_with: Callable[[Layout, str], StepEstimate]) -> list[str]:
    """What would fit `site`'s GPUs where the job's layout does not, as its job file would say it: of each kind of
    change (`_changes`) the least that fits, cheaper kinds first, each with its GiB a GPU (`step_with` a layout and
    recomputation: the step at the job's `micro`-batch), at most FIT_HINTS, and only where the job's GPUs still hold
    whole replicas that split its global batch and the model takes the split; the last kind (both with ZeRO 3) only
    where no change alone fits."""
    kinds = _changes(job, site.gpus_per_node, with_recompute=True)
    out: list[str] = []
    for k, tried in enumerate(kinds):
        if k == len(kinds) - 1 and out:
            break
        for said, change, how in tried:
            new = {**job.layout, **change}
            per_replica = new["tp"] * new["pp"] * new["cp"]
            if not _splits(job, new, micro):
                continue
            under = Layout(tp=new["tp"], pp=new["pp"], cp=new["cp"], dp=site.gpus // per_replica, zero=new["zero"])
            try:
                step = step_with(under, how)
            except InputError:  # a split the model does not take: heads or layers that do not divide
                continue
            if step.memory_gb <= spec.memory_gb:
                out.append(f"{said} ({step.memory_gb:.1f} GiB)")
                break
        if len(out) == FIT_HINTS:
            break
    return out


def _changes(job: Job, gpus_per_node: int, with_recompute: bool) -> list[list[tuple[str, dict[str, int], str]]]:
    """The changes to a job's layout that shard its model further, by kind, cheaper kinds first and the least of
    each first (said as its job file would say it, the layout's fields changed, the recomputation): a higher ZeRO
    stage (sharding over the replicas); full recomputation (`with_recompute`); more tensor parallelism, within a node
    of `gpus_per_node`; more pipeline parallelism; both with ZeRO 3, the fewest GPUs a replica first."""
    lay, recompute = job.layout, job.recompute
    return [[(f"layout.zero {z}", dict(zero=z), recompute) for z in range(lay["zero"] + 1, 4)],
            [("recompute full", {}, "full")] if with_recompute and recompute != "full" else [],
            [(f"layout.tp {t}", dict(tp=t), recompute) for t in (2, 4, 8) if lay["tp"] < t <= gpus_per_node],
            [(f"layout.pp {p}", dict(pp=p), recompute) for p in (2, 4, 8) if p > lay["pp"]],
            sorted(((f"layout.{'tp ' + str(t) + ', ' if t > 1 else ''}{'pp ' + str(p) + ', ' if p > 1 else ''}zero 3",
                     dict(tp=t, pp=p, zero=3), recompute)
                    for t in (1, 2, 4, 8) for p in (1, 2, 4, 8)
                    if t <= gpus_per_node and (t, p) != (1, 1) and (t > lay["tp"] or p > lay["pp"])),
                   key=lambda c: c[1]["tp"] * c[1]["pp"])]


def _splits(job: Job, layout: Mapping[str, int], micro: int) -> bool:
    """Whether every site's GPUs hold whole replicas of `layout` and they split the global batch in `micro`-batches."""
    per_replica = layout["tp"] * layout["pp"] * layout["cp"]
    return not any(s.gpus % per_replica for s in job.sites) and job.global_batch % (
        micro * sum(s.gpus // per_replica for s in job.sites)) == 0


def fitting_layout(job: Job) -> Job:
    """A job whose layout is auto (`Job.layout_auto`) on the least layout that fits every site's GPUs: its default
    (a GPU a replica) where it does, else the first change of `_changes` (a higher ZeRO stage, more tensor, more
    pipeline parallelism, both with ZeRO 3; never its recomputation, the job's own) under which every site's step
    fits, judged on physics' steps (memory is physics' alone); where none does, the default, whose refusal says what
    would fit. Any other job as it is."""
    if not job.layout_auto:
        return job
    micro = 1 if job.micro_batch == AUTO_MICRO_BATCH else job.micro_batch
    nodes = min(s.gpus_per_node for s in job.sites)
    for _, change, _ in [("", {}, job.recompute), *(c for kind in _changes(job, nodes, with_recompute=False)
                                                     for c in kind)]:
        candidate = dataclasses.replace(job, layout={**job.layout, **change})
        if not _splits(job, candidate.layout, micro):
            continue
        try:
            site_compute(candidate, "physics")
        except InputError as exc:
            if re.fullmatch(r"sites\[\d+\]\.gpu|layout(\..*)?", exc.field):  # past memory, or a split the model
                continue                                                       # does not take
            raise
        return candidate
    return job


def eval_steps(job: Job) -> int:
    """Global batches one evaluation runs: its share of the eval sequences, rounded up."""
    sequences = job.eval_tokens / (job.evals * job.seq)
    return math.ceil(sequences / job.global_batch - 1e-9) if sequences else 0


@dataclass(frozen=True, slots=True)
class Wan:
    """The inter-site ring's bottleneck: the slowest link, the longest round trip; `internet` if any link is."""

    gbytes_per_s: float
    rtt_s: float
    internet: bool


def wan(job: Job) -> Wan | None:
    if len(job.sites) < 2:
        return None
    return Wan(min(link.gbps for link in job.links) / 8.0, max(link.rtt_ms for link in job.links) / 1e3,
               any(link.mode == "internet" for link in job.links))


def evaluate(job: Job, sites: list[SiteCompute], kind: str, H: np.ndarray, P: np.ndarray, tau: np.ndarray,
             bits: np.ndarray, participation: np.ndarray, wan_gbytes_per_s: np.ndarray | None) -> dict[str, Any]:
    """The strategy `kind` at K points (arrays of H, P, tau, bits, participation and the inter-site bandwidth),
    vectorised: time, energy parts, bytes and utilisation per point, and per site."""
    K = len(H)
    M = len(sites)
    link = wan(job)
    H, P, tau, bits = (np.asarray(a, float) for a in (H, P, tau, bits))
    q = np.asarray(participation, float)
    B = (np.full(K, np.inf) if link is None else
         np.asarray(wan_gbytes_per_s if wan_gbytes_per_s is not None else np.full(K, link.gbytes_per_s), float) * 1e9)
    alpha = 0.0 if link is None else link.rtt_s / 2.0
    t_c = np.array([s.compute_s for s in sites])                 # [M] one step's compute with bubble
    t_intra = np.array([s.intra_exposed_s for s in sites])
    floor = np.array([s.input_floor_s for s in sites])          # [M] a step's input, where the pipeline is slower
    # the full model's trainable bytes in 16 bits (a replica's shards together), what crosses the WAN
    params_full = sites[0].step.trainable * job.layout["tp"] * job.layout["pp"]
    sync = kind in ("ddp", "fsdp")
    replicas = np.array([s.replicas for s in sites], float)
    gpus = np.array([s.site.gpus for s in sites], float)
    # data-parallel all-reduce inside each site (gradients every step, or every inner step for DiLoCo islands),
    # overlapped with the last micro-batch's backward
    site_dp = np.array([collectives.time_s("all-reduce", s.replicas, s.dp_bytes, s.dp_link["gbytes_per_s"],
                                           s.dp_link["latency_us"]) for s in sites])
    site_dp_bytes = np.array([collectives.sent_bytes("all-reduce", s.replicas, s.dp_bytes) for s in sites])
    window = np.array([_BACKWARD_SHARE * s.step.micro.time_s for s in sites])
    model_bytes = params_full * bits / 8.0                         # [K] what one synchronisation moves a site
    if sync:
        factor = _FSDP_VOLUME if kind == "fsdp" else 1.0
        wan_s, cross = np.zeros(K), np.zeros(K)
        if M > 1:  # hierarchical: within each site, then the whole model's gradients (16-bit) across sites
            wan_s = collectives.time_s("all-reduce", M, params_full * 2.0, B / 1e9, alpha * 1e6)
            cross = np.full(K, collectives.sent_bytes("all-reduce", M, params_full * 2.0)) * factor
        comm = factor * (site_dp[None, :] + wan_s[:, None])
        win = np.array([s.step.time_s for s in sites]) if kind == "fsdp" else window
        # every step waits for the slowest site, its latest rank and the last all-reduce
        late = _lateness_s(job, sites, int(gpus.sum()))
        period = np.max((t_c + t_intra + late)[None, :] + np.maximum(0.0, comm - win[None, :]), axis=1)
        period = np.maximum(period, np.max(floor))  # nor faster than the slowest input pipeline
        share = np.ones(M)
    else:
        late = _lateness_s(job, sites, gpus)   # each island waits for its own latest rank
        u = np.maximum(t_c + t_intra + late + np.maximum(0.0, site_dp - window), floor)  # [M] an inner step a site
        if job.stragglers == "wait":
            pace, share = np.max(u), np.ones(M)
        else:  # slower islands run fewer inner steps in the fastest island's time
            pace, share = np.min(u), np.min(u) / u
        round_s = H * pace
        stall, cross = np.zeros(K), np.zeros(K)
        if M > 1:
            if kind == "fedavg":  # the model up to a server and back, each client
                volume = 2.0 * model_bytes
                stall = 2 * alpha + volume / B
            else:
                volume = collectives.sent_bytes("all-reduce", M, model_bytes)
                if kind == "diloco":  # blocking outer all-reduce every H steps
                    stall = collectives.time_s("all-reduce", M, model_bytes, B / 1e9, alpha * 1e6)
                else:  # streaming: P fragments, each with tau steps to land; the link's average rate still binds
                    fragment = collectives.time_s("all-reduce", M, model_bytes / P, B / 1e9, alpha * 1e6)
                    stall = P * np.maximum(0.0, fragment - tau * pace)
                    stall = np.maximum(stall, volume / B - round_s)
            cross = volume / H
        period = (round_s + stall) / H                              # wall time per inner step of the pace site
    # work: job.steps global steps = every replica stepping that often; fedavg runs a share q of its clients a round
    work = q if kind == "fedavg" else np.ones(K)
    periods = job.steps * replicas.sum() / (np.sum(share * replicas) * work)
    time_s = periods * period
    lam = job.failures_per_island_hour / 3600.0
    if sync:  # every island failure stops the job: a restart and half a checkpoint interval redone
        time_s = time_s * (1.0 + lam * M * (job.restart_s + job.checkpoint_every_s / 2.0))
        lost = np.zeros(K)
    else:  # a failed island loses half its outer round and its restart; the others go on
        lost = np.minimum(0.9, lam * (job.restart_s + H * period / 2.0))
        time_s = time_s / (1.0 - lost)
    site_steps = (periods * work / (1.0 - lost))[:, None] * share[None, :]   # [K, M] steps each site computes
    eval_s = np.array([s.eval_s for s in sites])
    # evaluation pauses training, everywhere (its batches paced by the input pipeline too, the GPUs waiting for it),
    # and so do its switches in and out and the warm-up before the steady state, each waiting at every GPU
    paced = np.maximum(eval_s, np.array([s.eval_floor_s for s in sites]))
    time_s = time_s + np.max(paced) + job.evals * job.eval_overhead_s + job.startup_s
    compute_s = np.minimum(site_steps * t_c[None, :] + eval_s[None, :], time_s[:, None])
    nodes = np.array([s.site.nodes for s in sites], float)
    train_s = compute_s - eval_s[None, :]
    busy_j = gpus[None, :] * (train_s * np.array([s.busy_w for s in sites])[None, :]
                              + np.array([s.eval_j for s in sites])[None, :])
    active = work[:, None]  # a fedavg client not in the round is not running the job
    wait_s = np.maximum(0.0, time_s[:, None] * active - compute_s)
    wait_j = gpus[None, :] * wait_s * np.array([s.wait_w for s in sites])[None, :]
    host_j = nodes[None, :] * np.array([s.site.host_w for s in sites])[None, :] * time_s[:, None] * active
    switch_w = np.array([s.site.switch_w_per_node if s.site.nodes > 1 else 0.0 for s in sites])
    switch_j = nodes[None, :] * switch_w[None, :] * time_s[:, None] * active
    intra_bits = 8.0 * np.array([s.intra_bytes * s.site.gpus for s in sites])[None, :] * site_steps
    dp_bits = 8.0 * (site_dp_bytes * gpus)[None, :] * site_steps * (_FSDP_VOLUME if kind == "fsdp" else 1.0)
    pj_intra = np.array([s.intra_pj_per_bit for s in sites])
    pj_dp = np.array([s.dp_link["pj_per_bit"] for s in sites])
    wan_pj = reference("links")["wan-internet" if link is not None and link.internet else "wan-dedicated"]["pj_per_bit"]
    wan_bits = 8.0 * cross[:, None] * site_steps                     # each site's bytes over the WAN
    net_j = (intra_bits * pj_intra[None, :] + dp_bits * pj_dp[None, :] + wan_bits * wan_pj) * 1e-12
    pue = np.array([s.site.pue for s in sites])
    it_j = busy_j + wait_j + host_j + switch_j + net_j
    total_j = it_j * pue[None, :]
    # the compute's interval, comonotone; the data terms' stated band
    lo_c = np.array([s.step.energy_interval_j[0] / s.step.energy_j for s in sites])
    hi_c = np.array([s.step.energy_interval_j[1] / s.step.energy_j for s in sites])
    data_j = wait_j + host_j + switch_j + net_j
    lo_j = ((busy_j * lo_c[None, :] + data_j * (1 - _DATA_BAND)) * pue[None, :]).sum(axis=1)
    hi_j = ((busy_j * hi_c[None, :] + data_j * (1 + _DATA_BAND)) * pue[None, :]).sum(axis=1)
    local_j, carbon_kg = _carbon(job, sites, total_j, time_s, work)
    internet_kwh = (wan_bits.sum(axis=1) / 8e9 * reference("links")["wan-internet"]["allocational_kwh_per_gb"]
                    if link is not None and link.internet else np.zeros(K))
    utilisation = np.sum(compute_s * gpus[None, :], axis=1) / (time_s * gpus.sum() * work)  # of GPUs in the job
    return dict(time_s=time_s, energy_j=total_j.sum(axis=1), energy_lo_j=lo_j, energy_hi_j=hi_j,
                carbon_kg=carbon_kg.sum(axis=1), local_j=local_j.sum(axis=1), compute_utilisation=utilisation,
                gpu_compute_j=busy_j.sum(axis=1), gpu_wait_j=wait_j.sum(axis=1), host_j=host_j.sum(axis=1),
                switch_j=switch_j.sum(axis=1), network_j=net_j.sum(axis=1),
                pue_overhead_j=(total_j - it_j).sum(axis=1), intra_site_bytes=(intra_bits + dp_bits).sum(axis=1) / 8,
                inter_site_bytes=wan_bits.sum(axis=1) / 8, internet_allocational_kwh=internet_kwh,
                per_site=dict(energy_j=total_j, carbon_kg=carbon_kg, local_j=local_j, compute_s=compute_s))


_CARBON_BLOCK = 20_000_000  # points x hours evaluated at once (160 MB of float64 a term)


def _carbon(job: Job, sites: list[SiteCompute], energy_j: np.ndarray, time_s: np.ndarray,
            active: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(locally met J, kg CO2) per point and site: the site's energy spread evenly over the run, hour by hour from
    the job's start hour; local energy meets up to its kW in its daily hours; the grid supplies the rest. A site
    running the job a share `active` of the time (a federated client in a share of the rounds, at random) draws its
    power over that share: local energy meets that share of min(its power while running, the kW). The hours
    repeat (the day, each site's hourly series), so a run longer than one period of them is its whole periods plus
    the rest; points go in blocks, so that the hours times many points stay within memory."""
    period = 24
    for s in sites:
        period = math.lcm(period, len(s.site.carbon_series) or 1)
    hours = min(int(np.ceil(np.max(time_s) / 3600.0)) + 1, period)
    step = max(1, _CARBON_BLOCK // hours)
    active = np.ones(len(time_s)) if active is None else np.broadcast_to(np.asarray(active, float), time_s.shape)
    if len(time_s) > step:
        parts = [_carbon_block(job, sites, energy_j[i:i + step], time_s[i:i + step], active[i:i + step], hours)
                 for i in range(0, len(time_s), step)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return _carbon_block(job, sites, energy_j, time_s, active, hours)


def _carbon_block(job: Job, sites: list[SiteCompute], energy_j: np.ndarray, time_s: np.ndarray, active: np.ndarray,
                  hours: int) -> tuple[np.ndarray, np.ndarray]:
    K, M = energy_j.shape
    day = np.mod(job.start_hour + np.arange(hours), 24.0)          # each hour of the run, or of one period
    run_h = time_s[:, None] / 3600.0
    laps = np.floor(run_h / hours)                                  # whole periods (none where the run is shorter)
    rest = np.clip(run_h - laps * hours - np.arange(hours)[None, :], 0.0, 1.0)   # [K, hours] the last lap's part
    cover = laps + rest                                             # hours the run spends in each
    local = np.zeros((K, M))
    carbon = np.zeros((K, M))
    for m, s in enumerate(sites):  # a loop over sites (few), each vectorised over points and hours
        site = s.site
        power_w = energy_j[:, m] / time_s                            # average wall power
        drawn_j = power_w[:, None] * cover * 3600.0                 # [K, hours] the site's energy in each
        met_j = np.zeros((K, hours))
        if site.local_energy is not None:  # up to its kW while its window is open: the hours of each both share
            le = site.local_energy
            lit_h = (laps * _window_hours(day, day + 1.0, le.start_hour, le.end_hour)
                     + _window_hours(day, day + rest, le.start_hour, le.end_hour))
            # never more than the hour drew: where local energy meets every hour, the two products differ by a
            # rounding, which left the grid -1e-14 kg of carbon and met 1 + 5e-15 of the energy
            met_j = np.minimum((active * np.minimum(power_w / active, le.kw * 1e3))[:, None] * lit_h * 3600.0,
                               drawn_j)
        local[:, m] = met_j.sum(axis=1)
        ci = (np.resize(np.asarray(site.carbon_series), hours) if site.carbon_series
              else np.full(hours, site.carbon_g_per_kwh))
        grid_j = drawn_j - met_j
        carbon[:, m] = np.sum(grid_j / _J_PER_KWH * ci[None, :], axis=1) / 1e3
    return local, carbon


def _window_hours(a: np.ndarray, b: np.ndarray, start: float, end: float) -> np.ndarray:
    """Hours of [a, b] (hours of the day, 0 <= a < 24, b <= a + 1) inside a daily window from `start` to `end`, one
    that runs over midnight where the end comes first: its spans on the day before, that day and the next."""
    spans = [(start + d, end + d) for d in (-24.0, 0.0, 24.0)] if start < end else \
        [(start + d, end + d + 24.0) for d in (-24.0, 0.0)]
    return sum(np.clip(np.minimum(b, e) - np.maximum(a, s), 0.0, None) for s, e in spans)


def bandwidth_for_utilisation(job: Job, sites: list[SiteCompute], kind: str, H: np.ndarray, P: np.ndarray,
                              tau: np.ndarray, bits: np.ndarray, participation: np.ndarray,
                              target: float = 0.9) -> np.ndarray:
    """The inter-site bandwidth (Gbit/s) each point needs for `target` compute utilisation: bisection in log
    bandwidth, all points at once; NaN where even 100 Tbit/s does not reach it, or for one site."""
    K = len(H)
    if len(job.sites) < 2:
        return np.full(K, np.nan)
    lo, hi = np.full(K, np.log(1e-4)), np.full(K, np.log(1e5))   # Gbit/s
    top = evaluate(job, sites, kind, H, P, tau, bits, participation, np.exp(hi) / 8.0)["compute_utilisation"]
    for _ in range(40):
        mid = (lo + hi) / 2.0
        cu = evaluate(job, sites, kind, H, P, tau, bits, participation, np.exp(mid) / 8.0)["compute_utilisation"]
        ok = cu >= target
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    return np.where(top >= target, np.exp(hi), np.nan)


@dataclass(frozen=True, slots=True)
class PlanResult:
    strategy: str
    kind: str
    time_s: float
    energy_j: float
    energy_interval_j: tuple[float, float]
    time_interval_s: tuple[float, float]
    carbon_kg: float
    carbon_interval_kg: tuple[float, float]
    compute_utilisation: float
    compute_utilisation_interval: tuple[float, float]
    energy_per_token_j: float
    energy_per_token_interval_j: tuple[float, float]
    locally_met_share: float
    energy_split_j: dict[str, float]
    bytes_per_link: dict[str, float]
    internet_allocational_kwh: float
    bandwidth_for_90pct_gbps: float | None
    per_site: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class Plan:
    job: Job
    plans: list[PlanResult]
    sites: list[SiteCompute]

    def to_dict(self) -> dict[str, Any]:
        j = self.job
        sites = [dict(name=s.site.name, gpu=s.site.gpu, gpus=s.site.gpus, replicas=s.replicas,
                      micro_batch=s.micro_batch, accumulation=s.step.accumulation, step_compute_s=s.compute_s,
                      bubble_s=s.bubble_s, step_overhead_s=s.overhead_s, step_input_s=s.input_floor_s,
                      gpu_busy_w=s.busy_w, gpu_wait_w=s.wait_w,
                      memory_gb=s.step.memory_gb, method=s.step.micro.method,
                      flags=[str(f) for f in s.step.micro.flags if f != "exceeds-memory"])  # memory: checked above
                 for s in self.sites]
        return {"job": j.name, "model": j.model_name, "gpus": j.gpus, "steps": j.steps, "tokens": j.tokens,
                "unit": j.unit, "loader_rate": j.loader_rate,
                "layout": j.layout, "layout_auto": j.layout_auto, "fusions": list(j.fusions),
                "forward_overhead_s": j.forward_overhead_s,
                "evals": j.evals, "eval_steps": eval_steps(j), "eval_overhead_s": j.eval_overhead_s,
                "sites": sites, "plans": [p.to_dict() for p in self.plans]}


def _arrays(strategy: Any, K: int = 1) -> tuple[np.ndarray, ...]:
    return tuple(np.full(K, float(getattr(strategy, n))) for n in ("H", "P", "tau", "bits", "participation"))


def _at_time_bound(sites: list[SiteCompute], side: int) -> list[SiteCompute]:
    """The sites with each step's compute at the low (0) or high (1) end of its time interval, its GPU energy kept
    (the energy interval is its own)."""
    out = []
    for s in sites:
        f = s.step.time_interval_s[side] / s.step.time_s
        out.append(dataclasses.replace(s, compute_s=s.compute_s * f, bubble_s=s.bubble_s * f, eval_s=s.eval_s * f,
                                       busy_w=s.busy_w / f))
    return out


def plan(job: Job | str | os.PathLike | Mapping, estimator: Any = None) -> Plan:
    """Every strategy of the job (a `Job`, or a job file's path or mapping: `load_job`), side by side. Intervals:
    energy as `evaluate` gives it; time and utilisation with every step's compute at the ends of its time interval
    (comonotone); carbon and J a token in proportion to energy."""
    job = fitting_layout(job if isinstance(job, Job) else load_job(job))
    sites = site_compute(job, estimator)
    bounds = [_at_time_bound(sites, side) for side in (0, 1)]
    results = []
    for strategy in job.strategies:
        H, P, tau, bits, q = _arrays(strategy)
        r = evaluate(job, sites, strategy.kind, H, P, tau, bits, q, None)
        fast, slow = (evaluate(job, b, strategy.kind, H, P, tau, bits, q, None) for b in bounds)
        e, lo_e, hi_e = float(r["energy_j"][0]), float(r["energy_lo_j"][0]), float(r["energy_hi_j"][0])
        cus = sorted(float(x["compute_utilisation"][0]) for x in (fast, slow, r))
        need = bandwidth_for_utilisation(job, sites, strategy.kind, H, P, tau, bits, q)[0]
        wan_present = len(job.sites) > 1
        per_site = [dict(site=s.site.name, energy_j=float(r["per_site"]["energy_j"][0, m]),
                         carbon_kg=float(r["per_site"]["carbon_kg"][0, m]),
                         locally_met_share=float(r["per_site"]["local_j"][0, m] / r["per_site"]["energy_j"][0, m]),
                         compute_s=float(r["per_site"]["compute_s"][0, m]), grid=s.site.grid, pue=s.site.pue)
                    for m, s in enumerate(sites)]
        split = {k.removesuffix("_j"): float(r[k][0]) for k in ("gpu_compute_j", "gpu_wait_j", "host_j", "switch_j",
                                                               "network_j", "pue_overhead_j")}
        results.append(PlanResult(
            strategy=strategy.name, kind=strategy.kind, time_s=float(r["time_s"][0]), energy_j=e,
            energy_interval_j=(lo_e, hi_e), time_interval_s=(float(fast["time_s"][0]), float(slow["time_s"][0])),
            carbon_kg=float(r["carbon_kg"][0]),
            carbon_interval_kg=(float(r["carbon_kg"][0]) * lo_e / e, float(r["carbon_kg"][0]) * hi_e / e),
            compute_utilisation=float(r["compute_utilisation"][0]), compute_utilisation_interval=(cus[0], cus[-1]),
            energy_per_token_j=e / job.tokens, energy_per_token_interval_j=(lo_e / job.tokens, hi_e / job.tokens),
            locally_met_share=float(r["local_j"][0] / r["energy_j"][0]), energy_split_j=split,
            bytes_per_link={"intra_site": float(r["intra_site_bytes"][0]),
                            "inter_site": float(r["inter_site_bytes"][0])},
            internet_allocational_kwh=float(r["internet_allocational_kwh"][0]),
            bandwidth_for_90pct_gbps=float(need) if wan_present and np.isfinite(need) else None, per_site=per_site))
    return Plan(job=job, plans=results, sites=sites)


def _listed(values: object, name: str) -> list:
    """A sweep's axis given in Python: a list or tuple (or a numpy array) of its values; else one line naming it."""
    if isinstance(values, np.ndarray):
        values = values.tolist()
    require(isinstance(values, (list, tuple)), name, f"a list of values, got {kind_of(values)}")
    return list(values)


def _check_axes(**axes: list) -> None:
    """A sweep's axes as a job file's strategy and link take them (`data.job_file.AXIS_BOUNDS`, `check_bits`);
    else one line naming the axis (before, H 0 or P 0 reached the planner as a NaN or a division by zero, and tau
    -1 or bits 3 were planned)."""
    for name, values in axes.items():
        for v in values:
            if name == "bits":
                check_bits(v, name)
            else:
                check_number(v, name, **AXIS_BOUNDS[name])


# A plan sweep's strategy axes where none are given, within what shared/reference/distributed.md reports: H from 50
# to 1,000 (DiLoCo's H sweep 50-2,000, "H=1000 only +2.9 % perplexity vs H=50"), 1 to 10 fragments, overlap up to 5
# steps (Streaming DiLoCo: "tau <= 5 recommended"), 4- to 16-bit outer gradients (4-bit "no observed regression").
SWEEP_AXES = {"H": (50, 100, 500, 1000), "P": (1, 4, 10), "tau": (0, 1, 5), "bits": (4, 8, 16)}


def sweep(job: Job | str | os.PathLike | Mapping, *, H: Sequence[int] = SWEEP_AXES["H"],
          P: Sequence[int] = SWEEP_AXES["P"], tau: Sequence[int] = SWEEP_AXES["tau"],
          bits: Sequence[int] = SWEEP_AXES["bits"], gbps: list[float] | None = None,
          site_sets: list[list[str]] | None = None, kinds: tuple[str, ...] | None = None, front: str = "energy",
          power_limits: list[float | str] | None = None, estimator: Any = None, run: Any = None,
          progress: Any = None) -> "pd.DataFrame":
    """Every strategy kind of the job (a `Job`, or a job file's path or mapping, as `plan` takes it; or `kinds`) over
    the grid of H, P, tau, bits (default SWEEP_AXES), inter-site bandwidth (Gbit/s; default the job's), site subsets
    and power limits (W, each set on every GPU of the chosen sites; default the job file's; "range" or "range:N", as
    a sweep's, over the span every GPU of the set takes); each a list (a tuple or numpy array too). One row a
    point, with `pareto` marking the front of `front` (energy or carbon) against time to finish. Invalid combinations
    (P not dividing H, tau >= H / P, a limit a site's GPU does not allow) are left out, the last counted in
    `attrs["skipped"]`. Each site set, power limit and kind is one partition, evaluated vectorised over its points,
    in this process or on `run`'s workers (an executor of `joulecast.data.executors`): the points are the
    same either way."""
    import pandas as pd

    from joulecast.estimator.sweep import is_setting, pareto_mask, settings_of

    # a job file's path or mapping too, as `plan` takes it; an auto layout the least that fits every site
    job = fitting_layout(job if isinstance(job, Job) else load_job(job))
    require_choice(front, ("energy", "carbon"), "front")
    H, P, tau, bits = (_listed(v, n) for n, v in (("H", H), ("P", P), ("tau", tau), ("bits", bits)))
    gbps = None if gbps is None else _listed(gbps, "gbps")
    _check_axes(H=H, P=P, tau=tau, bits=bits, gbps=gbps or [])
    for kind in _listed(kinds, "kinds") if kinds is not None else ():
        require_choice(kind, STRATEGIES, "kinds", what="strategy kind")
    kinds = kinds or tuple(dict.fromkeys(s.kind for s in job.strategies))
    names = [s.name for s in job.sites]
    sets = [names] if site_sets is None else _listed(site_sets, "site_sets")
    for chosen in sets:
        require(isinstance(chosen, (list, tuple)) and chosen and all(isinstance(n, str) for n in chosen), "site_sets",
                f"each a list of site names of {', '.join(names)}, got {kind_of(chosen)}")
    for limit in _listed(power_limits, "power_limits") if power_limits is not None else ():
        require(is_setting(limit), "power_limits", f"each a number of W, range or range:N, got {kind_of(limit)}")
    for chosen in sets:
        unknown = [n for n in chosen if n not in names]
        require(not unknown, "site_sets", f"unknown site {unknown[0] if unknown else ''!r}; sites: {', '.join(names)}")
        _subset(job, chosen)  # a set no link connects: its error before any work
    skipped, parts = 0, []
    for chosen in sets:
        specs = [lookup_gpu(s.gpu) for s in job.sites if s.name in chosen]
        spans = np.array([spec.power_limit_whole_range_w for spec in specs])  # "range": what every GPU of the set takes
        for limit in settings_of(power_limits or [None], spans[:, 0].max(), spans[:, 1].min(), "power_limits"):
            try:  # every GPU of the set allows the limit, or the set at that limit is left out
                for s in job.sites:
                    if s.name in chosen and limit is not None:
                        check_setting(lookup_gpu(s.gpu), s.sm_clock_mhz, limit)
            except InputError:
                skipped += len(kinds)
                continue
            parts += [(chosen, kind, limit) for kind in kinds]
    if not parts:
        raise InputError("power_limits", f"no site set can be run at "
                           f"{', '.join(f'{w:g}' if isinstance(w, float) else str(w) for w in power_limits or [])} W")
    grid = dict(H=H, P=P, tau=tau, bits=bits, gbps=gbps)
    if run is None:
        frames = [_sweep_part(part, job, grid, estimator) for part in parts]
    else:  # `progress(n)`: n partitions done
        frames = run.map(_sweep_part, parts, job, grid, estimator, progress=progress)
    points = pd.concat([f for f in frames if f is not None], ignore_index=True)
    axis = points["energy_j" if front == "energy" else "carbon_kg"].to_numpy(float)
    points["pareto"] = pareto_mask(axis, points["time_s"].to_numpy(float), np.ones(len(points), bool))
    points.attrs["skipped"] = {"site set and limit a GPU does not allow": skipped} if skipped else {}
    return points


def _sweep_part(part: tuple[list[str], str, float | None], job: Job, grid: dict[str, Any],
                estimator: Any) -> "pd.DataFrame | None":
    """One site set, power limit (None: the job file's) and strategy kind of a sweep: its points, vectorised."""
    import itertools

    import pandas as pd

    chosen, kind, limit = part
    sub = _subset(job, chosen)
    if limit is not None:
        sub = dataclasses.replace(sub, sites=tuple(dataclasses.replace(s, power_limit_w=limit) for s in sub.sites))
    sites = site_compute(sub, estimator)
    bandwidths = (grid["gbps"] or [min(link.gbps for link in sub.links)]) if len(chosen) > 1 else [float("nan")]
    streaming, sync = kind == "streaming-diloco", kind in ("ddp", "fsdp")
    combos = [(h, p, t, b, g) for h, p, t, b, g in itertools.product(
              [1] if sync else grid["H"], grid["P"] if streaming else [1], grid["tau"] if streaming else [0],
              [16] if sync else grid["bits"], bandwidths) if not streaming or (h % p == 0 and t < h // p)]
    if not combos:
        return None
    a = np.array(combos, float)
    q = np.full(len(a), next((s.participation for s in job.strategies if s.kind == kind), 1.0))
    r = evaluate(sub, sites, kind, a[:, 0], a[:, 1], a[:, 2], a[:, 3], q, a[:, 4] / 8.0 if len(chosen) > 1 else None)
    return pd.DataFrame({
        "strategy": kind, "sites": "+".join(chosen), "power_limit_w": np.nan if limit is None else limit,
        "H": a[:, 0].astype(int), "P": a[:, 1].astype(int),
        "tau": a[:, 2].astype(int), "bits": a[:, 3].astype(int), "gbps": a[:, 4], "time_s": r["time_s"],
        "energy_j": r["energy_j"], "energy_lo_j": r["energy_lo_j"], "energy_hi_j": r["energy_hi_j"],
        "carbon_kg": r["carbon_kg"], "compute_utilisation": r["compute_utilisation"],
        "inter_site_bytes": r["inter_site_bytes"], "locally_met_share": r["local_j"] / r["energy_j"]})


def _subset(job: Job, chosen: list[str]) -> Job:
    """The job on some of its sites (and the links among them)."""
    sites = tuple(s for s in job.sites if s.name in chosen)
    links = tuple(link for link in job.links if link.a in chosen and link.b in chosen)
    if len(sites) > 1:
        connected([s.name for s in sites], list(links))
    return dataclasses.replace(job, sites=sites, links=links)
