"""Serving engines as data: `data/serving_engines.yaml`, each number with its source, validated at the door like the
GPU and architecture catalogs. What an engine adds to a decode step's kernels: host work the GPU waits out between
steps (or, where the engine schedules a step ahead, host work that runs under the GPU's step and sets the pace only
where it takes longer), the GPU's power meanwhile, its own decode attention kernel where it has one, how it
all-reduces a tensor-parallel step's activations, and its sampler where the physics prices it."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import yaml

from joulecast.data.architectures import expand_sources
from joulecast.data.errors import DataError, UnknownNameError, choice_message, hyphenated, is_choice

ENGINES_FILE = Path(__file__).parent / "serving_engines.yaml"
# The decode attention kernels the physics knows besides FlashAttention's (`joulecast.features.kinds.attention`).
DECODE_ATTENTION = ("paged",)
# How an engine all-reduces (`joulecast.features.collectives`): NCCL's ring, or its own one- or two-shot kernels.
ALL_REDUCE = ("ring", "custom")
# The samplers the physics prices (`joulecast.features.sampling`): `sort`, PyTorch-native top-p / top-k over a sorted
# vocabulary and penalties through count tables of its width.
SAMPLERS = ("sort",)
# Generous bounds: vLLM 0.5.4, the slowest engine measured, spends 0.45 ms a running sequence.
_MAX_HOST_MS = 100.0
_MAX_POWER_OVER_IDLE = 20.0


@dataclass(frozen=True, slots=True)
class ServingEngine:
    name: str
    host_s_per_sequence: float        # host work between steps that the GPU waits out, per running sequence
    power_over_idle: float            # the GPU's power meanwhile, x its idle power at maximum clock
    decode_attention: str | None      # the engine's own decode attention op, or None (FlashAttention's)
    sources: Mapping[str, str]
    all_reduce: str = "ring"          # ALL_REDUCE: NCCL's ring where the entry names none
    sampler: str | None = None        # SAMPLERS: its sampler's passes over the logits, or None (fused, not priced)
    host_overlaps: bool = False       # True: the host work runs under the GPU's step (async scheduling)
    host_s_per_tp_worker: float = 0.0  # host work a step, between steps, per tensor-parallel GPU beyond the first
    # the host work a running sequence took on the rows it was measured from, (lowest, highest): an estimate's interval
    # spans it (`joulecast.estimator.api.combine`); the figure at both ends where the entry states none
    host_s_per_sequence_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.host_s_per_sequence_range is None:
            object.__setattr__(self, "host_s_per_sequence_range", (self.host_s_per_sequence,) * 2)

    @classmethod
    def from_dict(cls, name: str, raw: Any, origin: str) -> "ServingEngine":
        """Validate one engine's entry (`origin` names the file in errors)."""
        def fail(field: str, message: str) -> DataError:
            return DataError(f"{origin}: {name}: field {field!r}: {message}")

        if not isinstance(raw, Mapping):
            raise DataError(f"{origin}: {name}: expected a mapping of fields")
        sources = expand_sources(raw.get("sources"), f"{origin}: {name}")
        values = {}
        for field, high in (("host_ms_per_sequence", _MAX_HOST_MS), ("power_over_idle", _MAX_POWER_OVER_IDLE),
                            ("host_ms_per_tp_worker", _MAX_HOST_MS)):
            value = raw.get(field, 0.0 if field == "host_ms_per_tp_worker" else None)  # the one optional
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= high:
                raise fail(field, f"must be a number from 0 to {high:g}, got {value!r}")
            values[field] = float(value)
        spread = _host_range(raw.get("host_ms_per_sequence_range"), values["host_ms_per_sequence"], fail)
        if values["power_over_idle"] < 1.0:
            raise fail("power_over_idle", f"a GPU waiting draws at least its idle power: at least 1, got "
                                          f"{values['power_over_idle']:g}")
        attention = raw.get("decode_attention")
        if attention is not None and not is_choice(attention, DECODE_ATTENTION):
            raise fail("decode_attention", choice_message(attention, DECODE_ATTENTION) + " (or none)")
        all_reduce = raw.get("all_reduce", "ring")
        if not is_choice(all_reduce, ALL_REDUCE):
            raise fail("all_reduce", choice_message(all_reduce, ALL_REDUCE))
        sampler = raw.get("sampler")
        if sampler is not None and not is_choice(sampler, SAMPLERS):
            raise fail("sampler", choice_message(sampler, SAMPLERS) + " (or none)")
        overlaps = raw.get("host_overlaps", False)
        if not isinstance(overlaps, bool):
            raise fail("host_overlaps", f"must be true or false, got {overlaps!r}")
        for field in ("host_ms_per_sequence", "power_over_idle", *(("decode_attention",) if attention else ()),
                      *(("all_reduce",) if "all_reduce" in raw else ()), *(("sampler",) if sampler else ()),
                      *(("host_overlaps",) if overlaps else ()),
                      *(("host_ms_per_tp_worker",) if "host_ms_per_tp_worker" in raw else ()),
                      *(("host_ms_per_sequence_range",) if spread else ())):
            if field not in sources:
                raise fail("sources", f"no source given for {field}")
        unknown = raw.keys() - {"host_ms_per_sequence", "host_ms_per_sequence_range", "power_over_idle",
                                "decode_attention", "all_reduce", "sampler", "host_overlaps", "host_ms_per_tp_worker",
                                "sources"}
        if unknown:
            raise fail(sorted(unknown)[0], "unknown field; allowed: host_ms_per_sequence, host_ms_per_sequence_range, "
                                           "power_over_idle, decode_attention, all_reduce, sampler, host_overlaps, "
                                           "host_ms_per_tp_worker, sources")
        # the decimal shifted, not divided: 0.454 ms is 0.454e-3 s to the last bit, as it was typed
        return cls(name=name, host_s_per_sequence=float(f"{values['host_ms_per_sequence']!r}e-3"),
                   power_over_idle=values["power_over_idle"], decode_attention=attention,
                   sources=MappingProxyType(sources), all_reduce=all_reduce, sampler=sampler, host_overlaps=overlaps,
                   host_s_per_tp_worker=float(f"{values['host_ms_per_tp_worker']!r}e-3"),
                   host_s_per_sequence_range=None if spread is None else
                   tuple(float(f"{ms!r}e-3") for ms in spread))


def _host_range(raw: Any, value: float, fail: Callable[[str, str], DataError]) -> tuple[float, float] | None:
    """An entry's `host_ms_per_sequence_range` (ms): [lowest, highest], around its figure `value`; None where absent."""
    if raw is None:
        return None
    if (not isinstance(raw, (list, tuple)) or len(raw) != 2
            or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in raw)):
        raise fail("host_ms_per_sequence_range", f"must be two numbers [lowest, highest] (ms), got {raw!r}")
    low, high = (float(v) for v in raw)
    if not 0 <= low <= value <= high <= _MAX_HOST_MS:
        raise fail("host_ms_per_sequence_range", f"must hold host_ms_per_sequence ({value:g}) between its lowest and "
                                                 f"highest, from 0 to {_MAX_HOST_MS:g}, got {raw!r}")
    return low, high


def parse(raw: Any, origin: str) -> Mapping[str, ServingEngine]:
    """Every engine of a file's content, by name."""
    if not isinstance(raw, Mapping) or not raw:
        raise DataError(f"{origin}: expected a mapping of engine names to their fields")
    return MappingProxyType({str(n): ServingEngine.from_dict(str(n), e, origin) for n, e in raw.items()})


@functools.cache
def catalog() -> Mapping[str, ServingEngine]:
    """Every shipped engine, by name."""
    return parse(yaml.safe_load(ENGINES_FILE.read_text()), str(ENGINES_FILE))


def engine(name: str) -> ServingEngine:
    known = catalog()
    if name not in known:
        raise UnknownNameError("engine", name, known)
    return known[name]


def normal_engine(name: object) -> object:
    """None for no engine, as each entry point's help says it ("none", any case, or empty); a catalog engine by its
    name as people write it (`catalog_name`); anything else as given, for the caller's check to name."""
    if name is None or (isinstance(name, str) and name.strip().lower() in ("", "none")):
        return None
    return catalog_name(name) or name if isinstance(name, str) else name


# The engines' names as their projects write them, to the catalog's spelling
_SPELLINGS = {"tensorrt-llm": "trt-llm", "trtllm": "trt-llm"}


@functools.cache
def catalog_name(name: str) -> str | None:
    """The catalog engine a name means, in any case, with spaces or underscores for hyphens ('vLLM 0.5.4' is
    vllm-0.5.4, 'TensorRT_LLM' trt-llm); None where it names none. An engine named without its release ('vllm') names
    none: its releases' host work differs fivefold, so the error lists them to pick from."""
    key = hyphenated(name)
    key = _SPELLINGS.get(key, key)
    return key if key in catalog() else None


def launch_mode_for(launch_mode: str | None, engine: object) -> str | None:
    """The launch mode a pass runs under where none was stated: CUDA graphs (`graph`) where a serving engine runs it,
    as the engines replay their steps (vLLM's, SGLang's captured batch sizes; TensorRT-LLM's runtime), else PyTorch's
    eager launches; a stated one as given, for the caller's check."""
    if launch_mode is not None:
        return launch_mode
    return "graph" if normal_engine(engine) is not None else "eager"


def check_engine(name: object, field: str = "engine") -> str | None:
    """`name` as a catalog engine (None for none, `normal_engine`), else one error naming `field`, with the close
    names or every name."""
    name = normal_engine(name)
    if name is None:
        return None
    if not isinstance(name, str) or name not in catalog():
        hint = "(or none, the kernels alone)"
        if _names_transformers(name):
            hint += f" {TRANSFORMERS_HINT}"
        raise UnknownNameError(field, str(name), catalog(), hint)
    return name


# Hugging Face transformers is no engine here: its own `generate` runs static batches, each padded to its longest
# prompt and decoding until its longest answer ends, which the generate job prices with no engine (eager launches).
TRANSFORMERS_HINT = ("Hugging Face transformers' generate has no continuous batching: price it as a generate job with "
                     "no engine (estimate --phase generate; --requests for a list of requests, batched as generate "
                     "runs them)")
_TRANSFORMERS_WORDS = frozenset({"hf", "transformers", "huggingface", "hugging"})


def _names_transformers(name: object) -> bool:
    """Whether an unknown engine name reads as Hugging Face transformers ('hf-transformers', 'HF', 'huggingface')."""
    return isinstance(name, str) and bool(_TRANSFORMERS_WORDS & set(re.split(r"[\s_./-]+", name.lower())))
