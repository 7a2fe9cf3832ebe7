"""A whole training run on one GPU (and one GPU's share of a parallel layout): micro-batches with gradient
accumulation, an optimizer step each global step, full fine-tuning or LoRA, recomputation, mixed precision with FP8.

One step is two estimates: the micro-step (forward and backward of one micro-batch, `features.train_step`) and the
optimizer update; the run is `steps` x (`accumulation` x micro-step + optimizer). A vision model's run is over images
(`global_batch` images a step, `tokens` counting images, no `seq`): its micro-step is the `training` phase's step
without its AdamW update, its memory the kernel table's (`features.memory`). Interval: the run's steps share the
model's error offset, so its bounds are the same sums of the parts' bounds (comonotone, as `estimator.jobs`).
Where the host's input pipeline is slower than the GPU (`loader_rate`), a step takes the pipeline's time, the GPU
waiting out the rest at idle power (`_fed_by_loader`).

Memory per GPU (stated approximations): weights at the compute dtype's width; for trainable parameters a gradient
at that width (2 bytes at least), an fp32 master copy where the weights are narrower than fp32, and the optimizer's
fp32 state (AdamW's two moments, 8 bytes, SGD's momentum, 4; ZeRO, Rajbhandari et al. 2020, section 3.1: 16 bytes a
parameter in mixed precision and in fp32 alike, as `features.memory` counts them), sharded over data-parallel ranks
by ZeRO stage 1 (optimizer state), 2 (+ gradients) and 3 (+ weights); activations by Korthikanti et al.'s count
(`_SAVED_BYTES`) for one micro-batch, times the micro-batches a first pipeline stage holds in flight
(min(pp, accumulation), 1F1B), or the last stage's one and its loss's fp32 log-probabilities (`_LOSS_BYTES`),
whichever is more.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from joulecast.data.errors import InputError, require, require_choice
from joulecast.data.files import check_count
from joulecast.data.fusions import check_fusions, check_overhead
from joulecast.data.gpus import GpuSpec
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kernels import DTYPE_BYTES, dtype_name
from joulecast.data.models import TEXT_TRAINING_OPTIONS, head_count, hidden_size, layer_count
from joulecast.data.workload import (AUTO_MICRO_BATCH, LAUNCH_MODES, MAX_LOADER_RATE, MAX_SIZE, MIN_LOADER_RATE,
                                     Workload, check_host_dispatch)
from joulecast.estimator.api import Estimate, estimate_batch
from joulecast.estimator.loading import load_estimator
from joulecast.features import memory, train_step
from joulecast.features.kernel_table import kernel_columns
from joulecast.features.lowering import is_vision, lm_head_weights, lower, refuse_idle_fusions, resolve_model
from joulecast.features.physics import check_setting
from joulecast.features.power import idle_power_w

# Activation bytes saved per token, hidden unit and layer (Korthikanti et al. 2022, arXiv 2205.05198, Table 2): 34
# with tensor and sequence parallelism dividing all of it by tp, the attention scores' 5as/h term dropped because
# fused attention saves no scores (eager attention's softmax and dropout save them: the term back, unless selective
# recomputation runs the attention again); 2 (each layer's input) with full recomputation. Counted for 16-bit
# activations (2 bytes an element, 1 a dropout mask): an fp32 run's, twice each (`_memory`; the masks' share, 2 of
# the 34, taken as wide too).
_SAVED_BYTES, _FULL_RECOMPUTE_BYTES, _SCORES_BYTES = 34.0, 2.0, 5.0
# The loss's bytes a head token and output its autograd keeps, whatever the layers recompute: the cross-entropy's
# fp32 log-probabilities (PyTorch's tools/autograd/derivatives.yaml: `_log_softmax`'s backward reads its `result`).
# A floor: Hugging Face's models also return their logits (and upcast them), which the training loop holds through
# the backward.
_LOSS_BYTES = 4.0


@dataclass(frozen=True, slots=True)
class Layout:
    """How one model replica is split over GPUs: tensor (tp), pipeline (pp), context (cp) parallel; dp replicas;
    ZeRO stage (0: none, 1-3; FSDP's full sharding is stage 3)."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1
    zero: int = 0

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    def check(self, field: str = "layout") -> "Layout":
        for name in ("tp", "pp", "cp", "dp"):
            check_count(getattr(self, name), f"{field}.{name}", MAX_SIZE)
        require(self.zero in (0, 1, 2, 3), f"{field}.zero", f"must be 0, 1, 2 or 3, got {self.zero!r}")
        return self


@dataclass(frozen=True, slots=True)
class StepEstimate:
    """One GPU's share of one global (optimizer) step."""

    micro: Estimate
    optimizer: Estimate | None
    forward: Estimate | None          # one micro-batch's forward pass alone (evaluation), where asked for
    accumulation: int
    params: int                 # weights on this GPU (its shard)
    trainable: int              # trainable parameters on this GPU
    memory_gb: float
    memory_parts_gb: dict[str, float]
    fusions: tuple[str, ...] = ()     # the kernel fusions applied
    overhead_s: float = 0.0           # the framework's time a forward pass over this GPU's layers (forward_overhead_s)
    forwards: int = 1                 # forward passes a micro-batch (2 with full recomputation)
    # recomputation -> activation GiB a token of a micro-batch held in flight (`_memory`): what another micro-batch
    # or recomputation would hold, without lowering the step again
    activations_gb_a_token: dict[str, float] | None = None

    def _sum(self, part: str, i: int | None = None) -> float:
        def one(e: Estimate | None) -> float:
            if e is None:
                return 0.0
            value = getattr(e, part)
            return float(value if i is None else (value[i] if value is not None else getattr(e, _POINT[part])))
        # the overhead at the micro-step's power (the gaps between a host-bound step's kernels are short)
        extra = self.forwards * self.overhead_s * (1.0 if part.startswith("time") else self.micro.power_w)
        return self.accumulation * (one(self.micro) + extra) + one(self.optimizer)

    @property
    def time_s(self) -> float:
        return self._sum("time_s")

    @property
    def energy_j(self) -> float:
        return self._sum("energy_j")

    @property
    def energy_interval_j(self) -> tuple[float, float]:
        return self._sum("energy_interval_j", 0), self._sum("energy_interval_j", 1)

    @property
    def time_interval_s(self) -> tuple[float, float]:
        return self._sum("time_interval_s", 0), self._sum("time_interval_s", 1)


_POINT = {"energy_interval_j": "energy_j", "time_interval_s": "time_s"}


@dataclass(frozen=True, slots=True)
class TrainRunEstimate:
    """A whole training run on one GPU (SI units in the names): its steps, tokens, batches and settings, energy with
    its interval, time, average power, J a token, and the memory it needs against the GPU's."""

    model: str
    gpu: str
    steps: int
    tokens: int
    global_batch: int
    micro_batch: int
    accumulation: int
    seq: int
    dtype: str
    finetune: str           # full or lora
    lora_rank: int
    recompute: str
    optimizer: str
    launch_mode: str        # eager or graph (CUDA graphs)
    head_tokens: int        # tokens a sequence the LM head and loss run over
    head_outputs: int | None  # the output head's width: None for the vocabulary (an LM head), else a task head's
    attention: str          # flash (fused), masked (fused, with an explicit mask) or eager (scores materialised)
    fusions: tuple[str, ...]  # kernel fusions applied (`joulecast.data.fusions`)
    forward_overhead_s: float  # the framework's seconds a layer and forward pass
    energy_j: float
    time_s: float
    power_w: float
    energy_interval_j: tuple[float, float]
    time_interval_s: tuple[float, float]
    step_time_s: float
    step_energy_j: float
    energy_per_token_j: float
    tokens_per_s: float
    memory_gb: float
    memory_parts_gb: dict[str, float]
    flags: tuple[str, ...]
    method: str
    step: StepEstimate | None = None
    outside_domain: tuple[str, ...] = ()  # out-of-domain: why (the micro-step's, `Estimate.outside_domain`)
    # where the run exceeds the GPU's memory: what would fit (`memory_fits`), else empty
    fits: tuple[dict[str, Any], ...] = ()
    # and where not one sequence fits one GPU: the fewest GPUs whose ZeRO-3 shards would (`sharded_fit`), else None
    fits_sharded: dict[str, Any] | None = None
    unit: str = "token"     # what `tokens` counts: a text model's tokens, or a vision model's images (`seq` 1)
    loader_rate: float | None = None  # samples (sequences or images) a second the host's input pipeline delivers
    loader_wait_s: float = 0.0  # seconds of the run the GPU waits for its input (`_fed_by_loader`)
    eval_tokens: int = 0        # tokens (images) evaluated over the run, forward only
    evals: int = 1              # evaluations they are split into, each in whole global batches
    micro_batch_auto: bool = False  # micro_batch "auto": the largest that fits the GPU's memory
    eval_time_s: float = 0.0    # the evaluations' share of time_s
    eval_energy_j: float = 0.0  # and of energy_j

    def to_dict(self) -> dict[str, Any]:
        names = [n for n in self.__dataclass_fields__ if n != "step"]
        return {n: getattr(self, n) for n in names}


def _count(name: str, value: object, low: int = 1) -> int:
    return check_count(value, name, 2**53, low=low, high_text="2^53")


# The host's input pipeline (PyTorch DataLoader's workers: reading, decoding, augmenting) prepares the next batches
# while the GPU runs this one, so a step takes the longer of the two. Where the pipeline is the slower, the GPU waits
# for each batch at its idle power at the run's clock, as it waits out the gaps between host-dispatched kernels
# (`features.power.idle_power_w`). The rate is the user's to state (samples a second, as iterating the loader alone
# measures it); None, the default, is a pipeline that keeps up (a vision model's JPEG decoding on too few CPU cores
# is the usual case that does not).
def check_loader_rate(value: object, where: str = "loader_rate") -> float | None:
    """An input pipeline's rate: None (one that keeps up), or samples a second, from MIN_LOADER_RATE to
    MAX_LOADER_RATE."""
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not MIN_LOADER_RATE <= float(value) <= MAX_LOADER_RATE:
        raise InputError(where, f"must be samples a second the input pipeline delivers, at least {MIN_LOADER_RATE:g} "
                                f"and at most {MAX_LOADER_RATE:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class _Fed:
    """A global step as the input pipeline paces it: its time and energy, their intervals, and the GPU's wait."""

    time_s: float
    energy_j: float
    time_interval_s: tuple[float, float]
    energy_interval_j: tuple[float, float]
    wait_s: float


def _fed_by_loader(step: _Fed, samples: int, rate: float | None, idle_w: float) -> _Fed:
    """A global batch's work `step` (of `samples` sequences or images) fed by a pipeline of `rate` samples a second:
    it takes at least samples / rate, the GPU idling at `idle_w` for what its work leaves of that. Each end of the
    interval waits for its own time (a faster GPU waits longer), the point kept inside."""
    floor = samples / rate if rate else 0.0

    def fed(time_s: float, energy_j: float) -> tuple[float, float]:
        wait = max(floor - time_s, 0.0)
        return time_s + wait, energy_j + idle_w * wait

    time_s, energy_j = fed(step.time_s, step.energy_j)
    ends = [fed(t, e) for t, e in zip(step.time_interval_s, step.energy_interval_j)]
    return _Fed(time_s=time_s, energy_j=energy_j, wait_s=step.wait_s + time_s - step.time_s,
                time_interval_s=(min(ends[0][0], time_s), max(ends[1][0], time_s)),
                energy_interval_j=(min(ends[0][1], ends[1][1], energy_j), max(ends[0][1], ends[1][1], energy_j)))


def _global_step(step: StepEstimate) -> _Fed:
    """A training step's time and energy with their intervals, before its input pipeline paces it."""
    return _Fed(step.time_s, step.energy_j, step.time_interval_s, step.energy_interval_j, 0.0)


def _eval_batch(step: StepEstimate) -> _Fed:
    """One evaluation global batch: `step.accumulation` forward passes of a micro-batch (`step.forward`), each
    waiting out the framework's overhead a forward at the forward's power (as `joulecast plan` evaluates): the step's
    own sums (`StepEstimate._sum`) with the forward in the micro-step's place and no update."""
    return _global_step(dataclasses.replace(step, micro=step.forward, optimizer=None, forwards=1))


def step_estimate(model: str, gpu: str, *, seq: int, micro_batch: int, accumulation: int, dtype: str = "bf16",
                  lora_rank: int = 0, lora_targets: str = "all", recompute: str = "none", optimizer: str = "adamw",
                  layout: Layout = Layout(),
                  sm_clock_mhz: float | None = None, power_limit_w: float | None = None,
                  estimator: Any = None, with_forward: bool = False, fp8_attention: bool = False,
                  launch_mode: str = "eager", head_tokens: int | None = None, head_outputs: int | None = None,
                  attention: str = "flash", fusions: tuple[str, ...] = (), forward_overhead_s: float = 0.0,
                  host_dispatch_s: float | None = None) -> StepEstimate:
    """One GPU's share of one optimizer step under `layout` (its shard of the model, its tokens of each sequence);
    `fp8_attention` runs the fused attention in FP8 too (Transformer Engine's FP8 dot-product attention);
    `launch_mode` "graph" replays each step as CUDA graphs (no host dispatch a kernel); `head_tokens` (default: every
    token) is how many tokens of each sequence the LM head and its loss run over, as a masked-LM with a dense output
    gathers the masked tokens first (NVIDIA's BERT `--dense_seq_output`); `head_outputs` (default: the vocabulary,
    an LM head) is the width of a task head fine-tuning puts in its place, with weights of its own: 2 for extractive
    question answering (a start and an end logit a token: Hugging Face's `...ForQuestionAnswering`), the label count
    for classification; `attention` the layers' attention (`joulecast.features.lowering`: flash, the default, fused;
    eager, its scores materialised, as Hugging Face's models ran before PyTorch's SDPA); `fusions` names the kernel
    fusions the training stack applies (`joulecast.data.fusions`; none: Hugging Face's eager kernels);
    `forward_overhead_s` the seconds a layer and forward pass of a micro-batch that the framework adds to the kernels
    (host-side work they do not hide), at the micro-step's power; `host_dispatch_s` the host's time an eager launch,
    where known (`Workload.host_dispatch_s`)."""
    layout.check()
    require(seq % layout.cp == 0, "layout.cp", f"{layout.cp} does not divide the sequence length {seq}")
    require_choice(launch_mode, LAUNCH_MODES, "launch_mode")
    head_tokens = seq if head_tokens is None else _count("head_tokens", head_tokens)
    require(head_tokens <= seq, "head_tokens", f"{head_tokens} is more than the sequence's {seq} tokens")
    head_outputs = None if head_outputs is None else _count("head_outputs", head_outputs)
    fusions = check_fusions(fusions)
    overhead = check_overhead(forward_overhead_s)
    require(attention != "eager" or layout.cp == 1, "attention",
            "eager attention holds a rank's whole sequence: context parallelism needs a fused kernel (flash or masked)")
    config, name, _ = resolve_model(model)
    require(not is_vision(config), "model", f"a training step's share of a layout needs a text model (its steps run "
            f"over tokens); {name} runs over images (train_run, or a plan's data-parallel vision step)")
    # LoRA's adapters are low-rank: one as wide as the layers adapts each matrix in full, with more weights than it
    require(lora_rank < hidden_size(config), "lora_rank", f"{lora_rank} is not below {name}'s hidden size "
            f"{hidden_size(config)} (a low-rank adapter; 0 fine-tunes every weight)")
    shard = train_step.shard_config(config, layout.tp, layout.pp)
    local_seq = seq // layout.cp
    forward, params = lower(shard, phase="prefill", batch=micro_batch, seq=local_seq, dtype=dtype, attention=attention,
                            lm_head=False, fusions=fusions, training=True)
    tokens = micro_batch * local_seq
    if layout.cp > 1:  # each rank's queries attend to the whole sequence's keys (ring attention)
        forward = [dict(r, seq_kv=r["seq_kv"] * layout.cp) if r["kind"] == "attention" else r for r in forward]
    if fp8_attention:
        require(dtype == "fp8", "fp8_attention", f"needs dtype fp8, got {dtype}")
        forward = [dict(r, dtype="fp8") if r["kind"] == "attention" else r for r in forward]
    hidden = hidden_size(shard)
    # the head runs as the layers' GEMMs do: on tensor cores where any of them does (fp32 on a GPU without TF32: none)
    gemms = [r for r in forward if r["kind"] == "gemm"]
    gemm = next((r for r in gemms if r.get("tensor_core")), gemms[0])
    # each rank's share of the head's tokens (context parallelism splits them with the sequence)
    head_rows = micro_batch * math.ceil(head_tokens / layout.cp)
    width = int(shard["vocab_size"]) if head_outputs is None else head_outputs  # a task head is whole on each rank
    head = train_step.lm_head_loss(head_rows, hidden, width,
                                   {k: gemm[k] for k in ("dtype", "acc_dtype", "tensor_core")})
    # a task head has weights of its own, in place of an untied LM head's, which the forward's count holds
    # (`lower`; a tied LM head's are the embedding's)
    if head_outputs is not None:
        own, tied = lm_head_weights(shard)
        params += width * hidden - (0 if tied else own)
    skip = train_step.skip_widths(shard, lora_targets)
    # the head's backward over its own tokens (the layers' over all of them); LoRA leaves an LM head frozen and
    # trains a task head whole (PEFT's `modules_to_save`, as its task types set for the classifier)
    task_head = head_outputs is not None
    records = [*train_step.micro_step(forward, tokens, lora_rank=lora_rank, recompute=recompute, skip_widths=skip),
               *train_step.micro_step(head, head_rows, lora_rank=0 if task_head else lora_rank, recompute=recompute,
                                      skip_widths=skip)]
    if not lora_rank:
        trainable = params
    elif task_head:
        trainable = train_step.lora_params(forward, tokens, lora_rank, skip) + width * hidden
    else:
        trainable = train_step.lora_params(forward + head, tokens, lora_rank, skip)
    forward = forward + head
    spec, kw, common = _step_setting(gpu, name, seq, dtype, launch_mode, host_dispatch_s, sm_clock_mhz,
                                     power_limit_w, estimator)
    opt_records = train_step.optimizer_step(math.ceil(trainable / (layout.dp if layout.zero >= 1 else 1)), optimizer)
    micro, opt, fwd = _estimated(spec, kw, Workload.from_table(
        kernel_columns(records), name=f"{name}/train-step/b{micro_batch}/s{seq}", batch=micro_batch, params=params,
        **common), Workload.from_table(kernel_columns(opt_records), name=f"{name}/optimizer", batch=1, params=0,
                                       **common) if opt_records else None,
        Workload.from_table(kernel_columns(forward), name=f"{name}/forward/b{micro_batch}/s{seq}", batch=micro_batch,
                            params=params, **{**common, "phase": "prefill"}) if with_forward else None)
    # eager attention's saved scores, a token's per layer: heads x keys, over the hidden width (`_SCORES_BYTES`)
    saved = head_count(shard) * seq / hidden if attention == "eager" else 0.0

    loss = _LOSS_BYTES * width * head_rows / tokens  # a token's share of the loss's log-probabilities

    def memory_parts(tokens_held: int, how: str) -> dict[str, float]:
        scores = saved if how == "none" else 0.0  # recomputation runs the attention again: its scores not saved
        return _memory(params, trainable, dtype, optimizer, layout, accumulation, how, tokens_held, hidden,
                       layer_count(shard), scores, loss)

    parts = memory_parts(tokens, recompute)
    per_token = {how: memory_parts(1, how)["activations"] for how in train_step.RECOMPUTE}
    return StepEstimate(micro=micro, optimizer=opt, forward=fwd, accumulation=accumulation, params=params,
                        trainable=trainable,
                        memory_gb=sum(parts.values()), memory_parts_gb=parts, fusions=fusions,
                        overhead_s=layer_count(shard) * overhead, forwards=2 if recompute == "full" else 1,
                        activations_gb_a_token=per_token)


def _estimated(spec: Any, kw: Mapping[str, Any], *workloads: Workload | None) -> list[Estimate | None]:
    """A run's step, optimizer update and forward pass (None: not run) estimated in one pass (`estimate_batch`)."""
    done = iter(estimate_batch([w for w in workloads if w is not None], spec, **kw))
    return [None if w is None else next(done) for w in workloads]


def _step_setting(gpu: str, name: str, seq: int | None, dtype: str, launch_mode: str, host_dispatch_s: float | None,
                  sm_clock_mhz: float | None, power_limit_w: float | None, estimator: Any
                  ) -> tuple[GpuSpec, dict[str, Any], dict[str, Any]]:
    """A step's GPU spec, the `estimate` settings of its parts (clock, limit, the estimator loaded once) and the
    fields their workloads share."""
    loaded = estimator if hasattr(estimator, "predict") else load_estimator(estimator)
    kw = dict(sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w, estimator=loaded if loaded is not None
              else "physics")
    common = dict(model=name, phase="training", seq=seq, dtype=dtype, source="config", launch_mode=launch_mode,
                  host_dispatch_s=check_host_dispatch(host_dispatch_s))
    return lookup_gpu(gpu), kw, common


def _update_bytes(dtype: str, optimizer: str) -> tuple[float, float]:
    """`features.memory.update_bytes` of a dtype's weights, as numbers."""
    grad, state = memory.update_bytes(DTYPE_BYTES[dtype], optimizer)
    return float(grad), float(state)


def _memory(params: int, trainable: int, dtype: str, optimizer: str, layout: Layout, accumulation: int,
            recompute: str, tokens: int, hidden: int, layers: int, scores: float = 0.0,
            loss: float = 0.0) -> dict[str, float]:
    """GiB per GPU by part (see the module's docstring); `scores`, the attention scores a token saves a layer over
    the hidden width, where eager attention saves them; `loss`, the bytes a token the loss keeps (`_LOSS_BYTES`), on
    the last pipeline stage, whose one micro-batch in flight a first stage's several may outweigh."""
    dp = layout.dp
    weights = params * DTYPE_BYTES[dtype] / (dp if layout.zero >= 3 else 1)
    grad_bytes, state_bytes = _update_bytes(dtype, optimizer)
    grads = trainable * grad_bytes / (dp if layout.zero >= 2 else 1)
    state = trainable * state_bytes / (dp if layout.zero >= 1 else 1)
    per_layer = _FULL_RECOMPUTE_BYTES if recompute == "full" else _SAVED_BYTES / layout.tp + _SCORES_BYTES * scores
    widths = max(DTYPE_BYTES[dtype] / 2.0, 1.0)  # the counts are of 16-bit activations: fp32's twice as wide
    stage = float(tokens) * hidden * layers * per_layer * widths  # one micro-batch's, a stage's layers
    activations = max(stage * min(layout.pp, accumulation), stage + float(tokens) * loss)
    return {"weights": weights / memory.GIB, "gradients": grads / memory.GIB, "optimizer": state / memory.GIB,
            "activations": activations / memory.GIB}


def left_as_is(value: Any, default: Any) -> bool:
    """Whether an option holds its default; a value of another kind (an array, an object) not."""
    try:
        return bool(value == default)
    except (TypeError, ValueError):  # an array's comparison, an object's
        return False


def vision_step(config: dict[str, Any], name: str, gpu: str, *, micro_batch: int, accumulation: int, dtype: str,
                optimizer: str, attention: str, launch_mode: str, sm_clock_mhz: float | None,
                power_limit_w: float | None, estimator: Any, host_dispatch_s: float | None,
                fusions: tuple[str, ...] = (), with_forward: bool = False) -> StepEstimate:
    """One global step of a vision model on one GPU: `accumulation` micro-steps of `micro_batch` images (the
    `training` phase's step without its AdamW update, with the kernel `fusions`: channels_last, or a transformer
    block's) and one optimizer update. Memory: the weights at the dtype's width; a gradient at that width, an fp32
    master copy for narrower weights and the optimizer's fp32 state (AdamW's two moments, SGD's momentum), as
    `features.memory` counts them; the activations autograd keeps of one micro-batch, from its kernel table.
    `with_forward`: one micro-batch's inference pass too (evaluation)."""
    require_choice(launch_mode, LAUNCH_MODES, "launch_mode")
    given, fusions = fusions, check_fusions(fusions)
    if fusions:  # one that changes none of its kernels (a transformer's on a ResNet) refused, as the CLI refuses it
        refuse_idle_fusions(model=config, phase="training", batch=micro_batch, dtype=dtype, attention=attention,
                            fusions=given)
    records, params = lower(config, phase="training", batch=micro_batch, seq=None, dtype=dtype, attention=attention,
                            fusions=fusions)
    micro_records = [r for r in records if r["op"] != "adamw"]  # the update runs once a global step, below
    spec, kw, common = _step_setting(gpu, name, None, dtype, launch_mode, host_dispatch_s, sm_clock_mhz,
                                     power_limit_w, estimator)
    columns = kernel_columns(micro_records)
    opt_records = train_step.optimizer_step(params, optimizer)
    inference = lower(config, phase="inference", batch=micro_batch, seq=None, dtype=dtype, attention=attention,
                      fusions=fusions)[0] if with_forward else None
    micro, opt, fwd = _estimated(spec, kw, Workload.from_table(
        columns, name=f"{name}/train-step/b{micro_batch}", batch=micro_batch, params=params, **common),
        Workload.from_table(kernel_columns(opt_records), name=f"{name}/optimizer", batch=1, params=0, **common),
        None if inference is None else Workload.from_table(
            kernel_columns(inference), name=f"{name}/forward/b{micro_batch}", batch=micro_batch, params=params,
            **{**common, "phase": "inference"}))
    activations = float(memory.need_bytes(columns, 1, [params], ["training"], [dtype])["activation_bytes"][0])
    grad_bytes, state_bytes = _update_bytes(dtype, optimizer)
    parts = {"weights": params * DTYPE_BYTES[dtype], "gradients": params * grad_bytes,
             "optimizer": params * state_bytes, "activations": activations}
    parts = {k: v / memory.GIB for k, v in parts.items()}
    return StepEstimate(micro=micro, optimizer=opt, forward=fwd, accumulation=accumulation, params=params,
                        trainable=params, memory_gb=sum(parts.values()), memory_parts_gb=parts, fusions=fusions,
                        activations_gb_a_token={"none": parts["activations"] / micro_batch})


def train_run(model: str, gpu: str, *, seq: int | None = None, global_batch: int, micro_batch: int | None = None,
              steps: int | None = None, tokens: int | None = None, dtype: str = "bf16", lora_rank: int = 0,
              lora_targets: str = "all", recompute: str = "none", optimizer: str = "adamw",
              sm_clock_mhz: float | None = None, power_limit_w: float | None = None, estimator: Any = None,
              launch_mode: str = "eager", head_tokens: int | None = None, head_outputs: int | None = None,
              attention: str = "flash", fusions: tuple[str, ...] = (), forward_overhead_s: float = 0.0,
              host_dispatch_s: float | None = None, loader_rate: float | None = None, eval_tokens: int = 0,
              evals: int = 1) -> TrainRunEstimate:
    """Estimate a training run on one GPU: `steps` optimizer steps (or enough steps for `tokens`) of `global_batch`
    sequences of `seq` tokens, in micro-batches of `micro_batch` (gradient accumulation = global / micro; "auto":
    the largest dividing the global batch whose memory fits the GPU at `recompute`, the global batch where it fits);
    `launch_mode`, `head_tokens`, `head_outputs`, `attention`, `fusions`, `forward_overhead_s` and `host_dispatch_s`
    as for `step_estimate`. A vision model's run is over images: `global_batch` images a step, `tokens` the images
    to train on, no `seq`, and none of the options only a text model has (LoRA, recomputation, heads, the
    framework's overhead a layer; its `fusions`: channels_last, or its transformer blocks'). `loader_rate`: the
    samples (sequences or images) a second the host's input pipeline delivers, where it may not keep up with the GPU
    (`_fed_by_loader`); None for one that does. `eval_tokens` (a vision model: images) are evaluated over the run in
    `evals` evaluations, each in whole global batches of forward passes of micro-batches (as `joulecast plan`'s job
    file evaluates; the loader paces them too).

    Raises:
        InputError: naming the field that is wrong (sizes, a global batch the micro-batch does not divide, steps
            and tokens both or neither given, an unknown optimizer or recomputation, a text model's option or a
            sequence length given for a vision model, none given for a text model).
    """
    config, name, _ = resolve_model(model)
    images = is_vision(config)
    if images:
        require(seq is None, "seq", f"a {name} run is over images ({name} takes no sequence length); give none")
        given = dict(lora_rank=lora_rank, lora_targets=lora_targets, recompute=recompute, head_tokens=head_tokens,
                     head_outputs=head_outputs, forward_overhead_s=forward_overhead_s)
        for field, (default, what) in TEXT_TRAINING_OPTIONS.items():
            require(left_as_is(given[field], default), field,
                    f"{what}: has no effect on {name}, a vision model; leave it out")
        seq = 1  # a step of `global_batch` images: one "token" each
    else:
        require(seq is not None, "seq", f"required for {name}'s run: tokens a sequence")
    seq, global_batch = _count("seq", seq), _count("global_batch", global_batch)
    auto = isinstance(micro_batch, str)
    require(not auto or micro_batch == AUTO_MICRO_BATCH, "micro_batch",
            f"must be a whole number or {AUTO_MICRO_BATCH!r} (the largest that fits the GPU), got {micro_batch!r}")
    micro_batch = global_batch if micro_batch is None or auto else _count("micro_batch", micro_batch)
    require(global_batch % micro_batch == 0, "micro_batch",
            f"{micro_batch} does not divide the global batch {global_batch}")
    require((steps is None) != (tokens is None), "steps", "give steps or tokens, one of them; got "
            f"{'neither' if steps is None else 'both'}")
    steps = _count("steps", steps) if steps is not None else math.ceil(_count("tokens", tokens) / (global_batch * seq))
    lora_rank = _count("lora_rank", lora_rank, low=0)
    dtype = dtype_name(dtype)
    accumulation = global_batch // micro_batch
    require_choice(optimizer, train_step.OPTIMIZERS, "optimizer")
    loader_rate = check_loader_rate(loader_rate)
    eval_tokens, evals = _count("eval_tokens", eval_tokens, low=0), _count("evals", evals)
    require(evals == 1 or eval_tokens > 0, "evals", "splits eval_tokens, which the run does not give")
    # each evaluation in whole global batches: its share of the eval sequences (images), rounded up
    eval_batches = evals * math.ceil(eval_tokens / (evals * seq * global_batch))

    def step_of(micro: int) -> StepEstimate:  # a step of `micro`-sequence micro-batches
        common = dict(micro_batch=micro, accumulation=global_batch // micro, dtype=dtype, optimizer=optimizer,
                      sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w, estimator=estimator,
                      launch_mode=launch_mode, attention=attention, fusions=fusions,
                      host_dispatch_s=host_dispatch_s, with_forward=eval_batches > 0)
        if images:
            return vision_step(config, name, gpu, **common)
        return step_estimate(model, gpu, seq=seq, lora_rank=lora_rank, lora_targets=lora_targets,
                             recompute=recompute, head_tokens=head_tokens, head_outputs=head_outputs,
                             forward_overhead_s=forward_overhead_s, **common)

    step = step_of(micro_batch)
    spec = lookup_gpu(gpu)
    if auto and step.memory_gb > spec.memory_gb:  # the largest micro-batch that fits: the fewest accumulated
        fitting = largest_fitting(step, step_of, spec.memory_gb, global_batch, seq, recompute)
        if fitting is None:
            raise _none_fits(step, spec, global_batch, seq, recompute)
        step = fitting
        accumulation = step.accumulation
        micro_batch = global_batch // accumulation
    flags = {f for f in step.micro.flags if f != "exceeds-memory"}
    fits: tuple[dict[str, Any], ...] = ()
    sharded = None
    if step.memory_gb > spec.memory_gb:
        flags.add("exceeds-memory")
        fits = memory_fits(step, spec.memory_gb, global_batch, seq)
        sharded = None if fits or images else sharded_fit(step, spec.memory_gb, global_batch, seq, recompute)
    idle_w = 0.0 if loader_rate is None else float(idle_power_w(spec, check_setting(spec, sm_clock_mhz,
                                                                                   power_limit_w)[0]))
    fed = _fed_by_loader(_global_step(step), global_batch, loader_rate, idle_w)
    judged = _fed_by_loader(_eval_batch(step), global_batch, loader_rate, idle_w) if eval_batches else None
    parts = [(steps, fed), *([(eval_batches, judged)] if judged else [])]
    if any(part.wait_s > 0 for _, part in parts):
        flags.add("input-bound")
    run_tokens = steps * global_batch * seq

    def total(of: Any) -> float:  # the run's sum of a figure over its steps and evaluations
        return sum(n * of(part) for n, part in parts)

    e, t = total(lambda p: p.energy_j), total(lambda p: p.time_s)
    return TrainRunEstimate(
        model=step.micro.workload.split("/")[0], gpu=spec.name, steps=steps, tokens=run_tokens,
        global_batch=global_batch, micro_batch=micro_batch, accumulation=accumulation, seq=seq, dtype=dtype,
        finetune="lora" if lora_rank else "full", lora_rank=lora_rank, recompute=recompute, optimizer=optimizer,
        launch_mode=launch_mode, head_tokens=seq if head_tokens is None else head_tokens, head_outputs=head_outputs,
        attention=attention if not images or step.micro.kernel_columns["kind"].isin(
            ("attention", "softmax")).any() else "none",  # a convolutional net runs none
        fusions=step.fusions,
        forward_overhead_s=float(forward_overhead_s),  # checked by step_estimate
        energy_j=e, time_s=t, power_w=e / t,
        energy_interval_j=(total(lambda p: p.energy_interval_j[0]), total(lambda p: p.energy_interval_j[1])),
        time_interval_s=(total(lambda p: p.time_interval_s[0]), total(lambda p: p.time_interval_s[1])),
        step_time_s=fed.time_s, step_energy_j=fed.energy_j,
        energy_per_token_j=e / run_tokens, tokens_per_s=run_tokens / t, memory_gb=step.memory_gb,
        memory_parts_gb=step.memory_parts_gb, flags=tuple(sorted(flags)), method=step.micro.method, step=step,
        fits=fits, fits_sharded=sharded, outside_domain=tuple(step.micro.outside_domain),
        unit="image" if images else "token",
        loader_rate=loader_rate, loader_wait_s=total(lambda p: p.wait_s), eval_tokens=eval_tokens, evals=evals,
        micro_batch_auto=auto,
        eval_time_s=eval_batches * judged.time_s if judged else 0.0,
        eval_energy_j=eval_batches * judged.energy_j if judged else 0.0)


def state_gb(parts: dict[str, float]) -> float:
    """GiB of a run's memory parts (`_memory`) that no micro-batch or recomputation changes: weights, gradients and
    optimizer state."""
    return sum(v for k, v in parts.items() if k != "activations")


def largest_fitting(step: StepEstimate, step_of: Callable[[int], StepEstimate], capacity_gb: float, batch: int,
                    seq: int, recompute: str) -> StepEstimate | None:
    """The step of the largest micro-batch dividing `batch` whose memory fits `capacity_gb` at `recompute` (`step`,
    any micro-batch's, gives its activations in proportion to the micro-batch, `memory_fits`' rule, to skip those
    that cannot; each one tried is estimated, `step_of`, and checked); None where none does (`train_run`'s and a
    plan's `micro_batch` "auto")."""
    per_token = (step.activations_gb_a_token or {}).get(recompute)
    fixed = state_gb(step.memory_parts_gb)
    for micro in _divisors(batch):
        if per_token is None or fixed + per_token * micro * seq <= capacity_gb:
            tried = step_of(micro)
            if tried.memory_gb <= capacity_gb:
                return tried
    return None


def _none_fits(step: StepEstimate, spec: GpuSpec, global_batch: int, seq: int, recompute: str) -> InputError:
    """`train_run`'s micro_batch "auto" where not one sequence fits: one line naming micro_batch with what would
    fit instead."""
    fixed = state_gb(step.memory_parts_gb)
    other = [f"recompute {f['recompute']} with micro_batch {f['micro_batch']}"
             for f in memory_fits(step, spec.memory_gb, global_batch, seq) if f["recompute"] != recompute]
    what = "sequence" if seq > 1 else "image"
    sharded = sharded_fit(step, spec.memory_gb, global_batch, seq, recompute) if seq > 1 else None
    over = (f"sharding over GPUs (joulecast plan: ZeRO 3 over {sharded['gpus']} GPUs fits, "
            f"{sharded['memory_gb']:,.4g} GiB a GPU)" if sharded else "sharding over GPUs (joulecast plan)")
    advice = (f"{', or '.join(other)} would" if other else
              f"the weights, gradients and optimizer state alone take {fixed:,.4g} GiB: fewer trained weights "
              f"(lora_rank) or {over}" if fixed >= spec.memory_gb else f"fewer trained weights (lora_rank) or {over}")
    return InputError("micro_batch", f"{AUTO_MICRO_BATCH}: not one {what} a micro-batch fits {spec.name}'s "
                                     f"{spec.memory_gb:g} GiB with recompute {recompute}; {advice}")


def sharded_fit(step: StepEstimate, capacity_gb: float, global_batch: int, seq: int,
                recompute: str) -> dict[str, Any] | None:
    """Where not one sequence of a run fits one GPU: the fewest data-parallel GPUs, a power of two up to the global
    batch (a sequence each at least), over which ZeRO stage 3 shards its weights, gradients and optimizer state
    (`_memory`: each over the GPUs) beside one sequence's activations at `recompute`, with its GiB a GPU; None where
    none does (tensor or pipeline parallelism then: `joulecast plan`)."""
    fixed = state_gb(step.memory_parts_gb)
    activations = (step.activations_gb_a_token or {}).get(recompute, math.inf) * seq
    gpus = 2
    while gpus <= global_batch and fixed / gpus + activations > capacity_gb:
        gpus *= 2
    if gpus > global_batch:
        return None
    return {"gpus": gpus, "zero": 3, "recompute": recompute, "memory_gb": fixed / gpus + activations}


def _divisors(n: int) -> list[int]:
    """The divisors of `n`, largest first."""
    return sorted({d for i in range(1, math.isqrt(n) + 1) if n % i == 0 for d in (i, n // i)}, reverse=True)


def memory_fits(step: StepEstimate, capacity_gb: float, global_batch: int, seq: int) -> tuple[dict[str, Any], ...]:
    """What a one-GPU run that exceeds `capacity_gb` would fit in: per recomputation (`train_step.RECOMPUTE`), the
    largest micro-batch that divides the global batch (the fewest accumulated, the fastest) whose memory fits, with
    its GiB; a recomputation is left out where no micro-batch fits with it, or where it fits no larger micro-batch than
    a lighter one does (it would only add work); none at all where not one sequence a micro-batch fits, even fully
    recomputed (LoRA, or sharding over GPUs: `joulecast plan`)."""
    fixed = state_gb(step.memory_parts_gb)
    divisors = _divisors(global_batch)
    out = []
    for how, per_token in (step.activations_gb_a_token or {}).items():
        largest = next((m for m in divisors if fixed + per_token * m * seq <= capacity_gb), 0)
        if largest > max((f["micro_batch"] for f in out), default=0):
            out.append({"recompute": how, "micro_batch": largest, "memory_gb": fixed + per_token * largest * seq})
    return tuple(out)
