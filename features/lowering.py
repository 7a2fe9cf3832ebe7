"""Workload -> kernel table: model configs and catalog names lowered to kernels, per phase.

Phases: ``prefill`` (a forward pass over `seq` tokens per sequence), ``decode`` (one new token per sequence with a
KV cache of `seq` tokens), ``training`` (forward, backward and an AdamW step), and ``inference`` for vision models.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from joulecast.data import engines, models
from joulecast.data.errors import InputError, require, require_choice
from joulecast.data.files import kind_of
from joulecast.data.fusions import NEEDS, check_fusions
from joulecast.data.kernels import DTYPES, dtype_name
from joulecast.data.workload import LAUNCH_MODES, PHASES, Workload, check_host_dispatch, check_sizes
from joulecast.features import arch
from joulecast.features import lower_transformers as lt
from joulecast.features import lower_vision as lv
from joulecast.features.builder import KernelBuilder
from joulecast.features.kernel_table import kernel_columns
from joulecast.features.train_step import backward

log = logging.getLogger(__name__)
# flash: one fused kernel that skips what a causal mask hides (FlashAttention-2, SDPA's flash path with is_causal);
# eager: GEMM, mask, softmax, GEMM; masked: SDPA given an explicit attention mask (a padded batch; Hugging Face
# transformers 4.38-4.39's Llama, which always passed its 4-D causal mask), which PyTorch runs on its
# memory-efficient kernel (its flash kernel takes no mask), every key block computed (`kinds.attention`)
ATTENTION_BACKENDS = ("flash", "eager", "masked")
_LOWERINGS: dict[str, Callable[..., None]] = {
    "gpt2": lt.gpt2, "bert": lt.bert, "opt": lt.opt, "llama": lt.llama, "vit": lt.vit,
    "resnet": lv.resnet, "mobilevit": lv.mobilevit,
}
_VISION = models.VISION
_ENCODERS = {"bert"} | _VISION

# AdamW step (PyTorch fused/foreach): reads param, grad, exp_avg, exp_avg_sq; writes param, exp_avg, exp_avg_sq.
ADAMW_OPERANDS = 7


def lower(config: Mapping[str, Any], *, phase: str, batch: int, seq: int, dtype: str, attention: str = "flash",
          lm_head: bool | None = None, fusions: tuple[str, ...] = (), flat_experts: bool = False,
          training: bool = False) -> tuple[list[dict[str, Any]], int]:
    """Lower one model config to kernel records, with the kernel `fusions` (`joulecast.data.fusions`) applied
    (`flat_experts`: a mixture of experts' GEMMs unsplit, `KernelBuilder.flat_experts`; `training`: the forward pass
    of a training step, which, as the "training" phase, runs no kernel quantizing an 8-bit GEMM's input: its stack
    casts it inside the kernel before, `KernelBuilder.quantize`); returns (records, the weights
    the pass holds: an LM head whether run or not, once where tied; a training step's none, its loss over the hidden
    states)."""
    fam = models.family(config)
    batch, seq = check_lowering(config, phase=phase, batch=batch, seq=seq, dtype=dtype, attention=attention)
    decode = phase == "decode"
    shape = lt.Shape(batch, 1 if decode else (seq or 1), seq or 1, decode)
    if lm_head is None:
        lm_head = decode
    builder = KernelBuilder(dtype=dtype, fusions=frozenset(check_fusions(fusions)), flat_experts=flat_experts,
                            quantize_inputs=not (training or phase == "training"))
    _LOWERINGS[fam](builder, config, shape, attention, lm_head)
    records, params = builder.records, builder.params
    head, tied = lm_head_weights(config)
    if lm_head and tied:  # a tied head reads the embedding's weights
        params -= head
    elif not lm_head and not tied and phase != "training":
        # a pass that runs no head (a prefill's logits left out) still holds the model's own, in memory; a training
        # step's loss runs over the hidden states, as the collector's does: no head to hold
        params += head
    if phase == "training":
        records = training_step(records, params)
    return records, params


def check_job(config: Mapping[str, Any], job: str, field: str = "phase", label: str | None = None) -> None:
    """A whole job's model checked before its steps lower: a generation or serving needs a decoder (tokens
    generated one at a time); a training run (train-run) takes any model, a vision model's over images. Else one
    line naming `field` and what the model runs instead, the job called `label` (default its kind). Before, the
    step's phase was named: 'decode' is not available, for --phase generate."""
    if job == "train-run":
        return
    fam = models.family(config)
    if fam in _ENCODERS:
        runs = "inference, one training step and a training run (--phase inference, training, train-run)" \
            if fam in _VISION else "prefill, training and train-run"
        raise InputError(field, f"{label or job} needs a decoder (tokens generated one at a time); a {fam} model "
                                f"runs {runs}")


def check_lowering(config: Mapping[str, Any], *, phase: str, batch: int, seq: int | None, dtype: str,
                   attention: str) -> tuple[int, int | None]:
    """(batch, seq) of a configuration that can be lowered (seq None for a vision model), each field checked, with
    a warning where seq passes the model's positions; else an InputError naming the field."""
    fam = models.family(config)
    check_sizes(batch, seq, has_seq=fam not in _VISION)
    batch, seq = int(batch), None if fam in _VISION else int(seq)  # type: ignore[arg-type]
    require_choice(dtype, DTYPES, "dtype")
    require_choice(attention, ATTENTION_BACKENDS, "attention")
    allowed = ("inference", "training") if fam in _VISION else tuple(p for p in PHASES if p != "inference")
    if fam in _ENCODERS and fam not in _VISION:
        allowed = ("prefill", "training")
    require(phase in allowed, "phase", f"{phase!r} is not available for a {fam} model; allowed: {', '.join(allowed)}")
    if fam not in _VISION:
        warn_positions(config, seq)
    return batch, seq


def resolve_model(model: str | Mapping[str, Any]) -> tuple[dict[str, Any], str, str]:
    """(config, name, source) of a catalog model name, a config path or a config mapping."""
    if isinstance(model, Mapping):
        config = models.check_config(model)
        return config, str(config.get("name", config.get("model_type", "config"))), "config"
    if not isinstance(model, (str, os.PathLike)):  # a Workload too: a job lowers its own passes from the model
        said = "a Workload (give its model, e.g. 'gpt2')" if isinstance(model, Workload) else kind_of(model)
        raise InputError("model", f"a catalog model name, a config.json path or a config mapping, got {said}")
    if str(model).endswith(".json") or (not models.is_model_name(model) and _holds_config(model)):
        config = models.check_config(models.load_config(model, "model"))
        return config, str(config.get("name") or config.get("model_type")), "config"
    entry = models.model_entry(str(model))
    return {**entry["config"], **{k: v for k, v in entry.items() if k != "config"}}, entry["name"], "catalog"


def _holds_config(path: str | os.PathLike) -> bool:
    """Whether a model argument that is no catalog name is a config file, whatever its name, or a model's folder
    holding a config.json (a Hugging Face snapshot)."""
    return os.path.isfile(path) or os.path.isfile(os.path.join(path, "config.json"))


# The families whose lowering ends in a vocabulary-wide LM head (`lower_transformers._lm_head`; BERT's encoder and the
# vision models end without one), each with whether its head is tied to the embedding where a config does not say:
# Hugging Face's GPT2Config and OPTConfig keep PretrainedConfig's True, LlamaConfig (Mistral's, Qwen2's) sets False.
_LM_HEADS = {"gpt2": True, "opt": True, "llama": False}


def lm_head_weights(config: Mapping[str, Any]) -> tuple[int, bool]:
    """(weights of a model's vocabulary-wide LM head, whether it is tied to the embedding): Hugging Face's
    `tie_word_embeddings`, or the family's default (`_LM_HEADS`); (0, True) for a family without one."""
    fam = models.family(config)
    if fam not in _LM_HEADS:
        return 0, True
    return int(config["vocab_size"]) * models.hidden_size(config), bool(config.get("tie_word_embeddings",
                                                                                  _LM_HEADS[fam]))


@functools.lru_cache(maxsize=None)
def parameter_count(model: str) -> int:
    """A catalog model's weights: its prefill's (`lower`'s: linear, convolution and embedding weights, the LM head
    held whether run or not, once where it is tied to the embedding); biases and norms left out, under 0.2 % of
    every weight, bias and norm of the same configs (shared/reference/models: GPT-2 124.3 M against 124,439,808,
    the "124M" of its name; Llama-3-8B 8.030 B against 8,030,261,248). A vision model's classifier counts where its
    lowering runs one: MobileViT-small's runs none (4.9 M against MobileViT-S's 5.6 M with its 640 x 1,000
    classifier, Mehta and Rastegari, ICLR 2022)."""
    config = resolve_model(model)[0]
    return int(lower(config, phase="inference" if is_vision(config) else "prefill", batch=1, seq=8, dtype="fp32")[1])


def active_parameter_count(model: str) -> int:
    """The weights one token runs through (`parameter_count` counted as it is): a mixture of experts' less the
    experts each layer leaves it (Mixtral-8x7B: 12.9 B of 46.7 B, 2 of 8 experts a layer); a dense model's all."""
    config = resolve_model(model)[0]
    experts = lt.expert_counts(config) if models.family(config) == "llama" else None
    if experts is None:
        return parameter_count(model)
    held, routed, width = experts
    idle = (held - routed) * 3 * models.hidden_size(config) * width
    return parameter_count(model) - idle * models.layer_count(config)


def model_listing() -> list[dict[str, Any]]:
    """The model catalog as `joulecast models` and GET /v1/models list it: name, family, weights
    (`parameter_count`), the weights a token runs (`active_parameter_count`), the tokens its positions reach (a text
    model's context: past it an estimate warns; None for a vision model), Hugging Face id and aliases."""
    return [dict(name=e["name"], family=e["family"], params=parameter_count(e["name"]),
                 active_params=active_parameter_count(e["name"]),
                 context=None if models.is_vision(e["config"]) else
                 e["config"].get("max_position_embeddings") or e["config"].get("n_positions"),
                 hf_id=e["hf_id"], aliases=list(e["aliases"]))
            for e in models.catalog().values()]


# Fields a single pass of some families ignores (`workload` takes their defaults for every model), each with why:
# given for such models alone, `ignored_field` names it rather than give figures that do not depend on it.
_IMAGES = "a pass is {batch} images of the size its config sets"
IGNORED_BY = {"seq": {"vit": _IMAGES, "resnet": _IMAGES, "mobilevit": _IMAGES},
              "attention": {"resnet": "no attention", "mobilevit": "transformers' MobileViT runs its attention "
                                                                  "unfused whatever the backend"}}


def ignored_field(names: list[Any], given: set[str]) -> tuple[str, str] | None:
    """(field, message) of the first of `given` that every one of the models `names` (names, paths or configs)
    ignores, the message saying why for each family ('{batch}' where the caller names its batch field); else None."""
    fields = [f for f in IGNORED_BY if f in given]
    families = sorted({models.family(resolve_model(m)[0]) for m in names}) if fields else []
    for field in fields:
        why = IGNORED_BY[field]
        if families and all(f in why for f in families):
            by_reason: dict[str, list[str]] = {}
            for f in families:
                by_reason.setdefault(why[f], []).append(f)
            reasons = "; ".join(r if len(by_reason) == 1 else f"{' and '.join(fs)}: {r}" for r, fs in by_reason.items())
            return field, f"has no effect with {' or '.join(families)} ({reasons}); leave it out"
    return None


def idle_fusions(fused: Workload, **fields: Any) -> tuple[str, ...]:
    """The fusions of `fused`, a workload built with `fields` (`workload`'s arguments), that change none of its
    kernels: all of them where it has the very kernels of the same workload without fusions; else each whose removal
    from the others leaves its kernels as they are (Llama's `residual_norm` without `norm`, GPT-2's `rope` beside
    `activation`); none where each is idle beside the others but not the set (two fusions doing one thing)."""
    names = check_fusions(fields["fusions"])
    mine = fused.columns

    def same(kept: list[str]) -> bool:
        other = workload(**dict(fields, fusions=kept)).columns
        return other.keys() == mine.keys() and all(np.array_equal(other[k], mine[k]) for k in mine)

    if same([]):
        return names
    idle = tuple(n for n in names if same([m for m in names if m != n]))
    return () if idle == names else idle


def fusions_refusal(idle: Sequence[str], fusions: Any, models: Sequence[str], phase: str) -> str | None:
    """The message refusing `idle` (`idle_fusions`, of every one of `models` in `phase`) among the `fusions` given
    (as the caller wrote them); None where there are none."""
    if not idle:
        return None
    whose = " or ".join(f"{m}'s" for m in models)
    names = check_fusions(fusions)
    needs = "".join(f" ({n} applies only with {NEEDS[n]})" for n in idle if NEEDS.get(n) and NEEDS[n] not in names)
    if tuple(idle) == names:
        return f"{fusions!r} changes none of {whose} kernels in {phase}{needs}; leave it out"
    rest = ", ".join(n for n in names if n not in idle)
    return (f"{', '.join(idle)} {'changes' if len(idle) == 1 else 'change'} none of {whose} kernels in {phase} "
            f"beside {rest}{needs}; leave {'it' if len(idle) == 1 else 'them'} out")


def ignored_fusions(fused: Workload, **fields: Any) -> str | None:
    """Where `fused`, a workload built with `fields` (`workload`'s arguments), has fusions that change none of its
    kernels (`idle_fusions`: none applies to the model, or one applies only beside another not given): the message
    saying so; else None."""
    return fusions_refusal(idle_fusions(fused, **fields), fields["fusions"], [fused.model], fused.phase)


def refuse_idle_fusions(**fields: Any) -> None:
    """`ignored_fusions` of the workload `fields` build, raised as one line naming `fusions` (a plan's and a vision
    run's check, as `estimate` makes it)."""
    message = ignored_fusions(workload(**fields), **fields)
    if message:
        raise InputError("fusions", message)


is_vision = models.is_vision


def normal_phase(config: Mapping[str, Any], phase: str) -> str:
    """A vision model's forward pass is ``inference``; ``prefill`` is accepted for it."""
    return "inference" if is_vision(config) and phase == "prefill" else phase


def engine_records(records: list[dict[str, Any]], engine: str | None) -> list[dict[str, Any]]:
    """A serving engine's own decode attention kernel in place of FlashAttention's, where it has one."""
    paged = arch.SERVING_ENGINES[engine].get("decode_attention") if engine else None
    if not paged:
        return records
    return [dict(r, op=paged) if r["kind"] == "attention" and r.get("seq_q") == 1 else r for r in records]


def warn_positions(model: str | Mapping[str, Any], seq: int) -> None:
    """Warn once where `seq` exceeds a model's learned position table (GPT-2, BERT, OPT)."""
    config = resolve_model(model)[0] if isinstance(model, str) else model
    limit = config.get("max_position_embeddings") or config.get("n_positions")
    if limit and seq > limit and not is_vision(config):
        learned = models.family(config) in ("gpt2", "bert", "opt")  # a position table, not rotary positions
        # once a model: a generation's prefill and each of its longer decode contexts would each say it again
        key = (config.get("name") or config.get("_name_or_path") or config.get("model_type"), limit)
        if key not in _WARNED:
            _WARNED.add(key)
            log.warning(f"seq {seq} exceeds this model's {limit} "
                        f"{'learned positions' if learned else 'trained context'}; estimating as if it were extended")


_WARNED: set[tuple[Any, int]] = set()  # (model, its limit) warned of in this process


def training_step(forward: list[dict[str, Any]], params: int) -> list[dict[str, Any]]:
    """Forward records -> forward + backward + optimizer records.

    Each GEMM/convolution gets its two backward GEMMs (input gradient and weight gradient), same FLOPs; a streaming
    kernel its backward as autograd launches it, fused attention its backward passes (`kinds.attention`); AdamW
    updates every weight in fp32.
    """
    out = list(forward)
    for r in forward:
        out += backward(r)
    if params:
        out.append(dict(kind="elementwise", op="adamw", dtype="fp32", acc_dtype="fp32", rows=1, cols=params, count=1))
    return out


def workload(model: str | Mapping[str, Any], *, phase: str = "prefill", batch: int = 1, seq: int | None = 512,
             dtype: str = "bf16", attention: str = "flash", lm_head: bool | None = None,
             launch_mode: str | None = None, engine: str | None = None, fusions: Any = (),
             host_dispatch_s: float | None = None) -> Workload:
    """Build a `Workload` from a catalog model name, a config path, or a config mapping.

    Args:
        model: catalog name (``"llama-3-8b"``), path to a Hugging Face style ``config.json``, or the config itself.
        phase: ``prefill``, ``decode``, ``training`` (``inference`` for vision models; ``prefill`` is accepted there).
        batch: sequences (or images) per pass.
        seq: tokens per sequence (the KV-cache length for ``decode``); ignored by vision models.
        dtype: compute dtype, one of `joulecast.data.kernels.DTYPES`.
        attention: ``flash`` (one fused kernel), ``eager`` (GEMM, mask, softmax, GEMM) or ``masked`` (one fused
            kernel given an explicit mask, `ATTENTION_BACKENDS`).
        lm_head: add the vocabulary projection of the last token (default: only for ``decode``).
        launch_mode: ``eager`` or ``graph``; default ``graph`` where an engine runs the pass, else ``eager``.
        engine: a serving engine (`joulecast.features.arch.SERVING_ENGINES`) whose host work per step adds to the
            kernels' time, or None.
        fusions: kernel fusions the stack applies (`joulecast.data.fusions`: a list or a comma-separated string);
            none: Hugging Face's eager kernels.
        host_dispatch_s: the machine's host time to dispatch one eager kernel launch (s), where known; default
            `joulecast.features.arch.HOST_DISPATCH_S`.

    Raises:
        InputError: naming the field that is wrong and what is allowed.
    """
    engine = engines.check_engine(engine)
    launch_mode = engines.launch_mode_for(launch_mode, engine)
    require_choice(launch_mode, LAUNCH_MODES, "launch_mode")
    dtype = dtype_name(dtype)
    fusions = check_fusions(fusions)
    host_dispatch_s = check_host_dispatch(host_dispatch_s)
    config, name, source = resolve_model(model)
    phase = normal_phase(config, phase)
    # a catalog model's structure evaluated at this size (the same kernel table as its lowering, a fifth of the
    # time: `lower_many.catalog_columns`), else lowered
    built = None
    if source == "catalog" and lm_head is None:
        from joulecast.features import lower_many  # it lowers its probes through this module

        checked_batch, checked_seq = check_lowering(config, phase=phase, batch=batch, seq=seq, dtype=dtype,
                                                    attention=attention)
        built = lower_many.catalog_columns(name, phase, checked_batch, checked_seq, dtype, attention, engine, fusions)
    encoded = {}
    if built is not None:
        columns, labels, params = built
        encoded = {name: (columns[name], v) for name, v in labels.items()}
    else:
        records, params = lower(config, phase=phase, batch=batch, seq=seq, dtype=dtype, attention=attention,
                                lm_head=lm_head, fusions=fusions)
        columns = kernel_columns(engine_records(records, engine))
    seq_part = "" if models.family(config) in _VISION else f"/s{seq}"
    engine_part = f"/{engine}" if engine else ""
    fused_part = f"/fused-{'+'.join(fusions)}" if fusions else ""
    return Workload(name=f"{name}/{phase}/b{batch}{seq_part}/{dtype}{engine_part}{fused_part}",
                    columns=columns,
                    model=name, phase=phase, batch=batch, seq=None if models.family(config) in _VISION else seq,
                    dtype=dtype, source=source, launch_mode=launch_mode, engine=engine, params=params,
                    host_dispatch_s=host_dispatch_s, encoded=encoded)
