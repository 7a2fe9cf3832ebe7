"""Collection plans: a YAML grid of kernels and catalog-model workloads, expanded into typed `PlanItem`s.

    name: h200-first                 # the collection id
    gpu: h200                        # catalog GPU the plan is sized for (dry-run durations come from its physics)
    settings: {min_window_s: 1.0, min_iterations: 5, repeats: 3, warmup_s: 0.5, idle_s: 5}
    kernels:
      - op: gemm
        dtype: [bf16, fp8]
        grid: {m: [1024, 4096], n: [4096], k: [4096]}   # cartesian product
        shapes: [{m: 16, n: 4096, k: 4096}]              # and/or an explicit list
    models:
      - model: [llama-3-8b]
        phase: [prefill, decode, training]
        batch: [1, 8]
        seq: [512]
        dtype: [bf16]
        overrides: {num_hidden_layers: 2}               # optional config overrides (shrunk models for tests)
    waits:                           # the GPU waiting, not computing (rows with no workload: never trained on)
      - mode: [spin, idle-context]   # spin: a kernel polling the clock, as NCCL's poll a flag while peers are late;
        us: [1000]                   # idle-context: a CUDA context held, no kernel; us: microseconds a launch
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from joulecast.data.errors import InputError, fields_under, require, require_choice
from joulecast.data.files import load_yaml, read_text, whole_number
from joulecast.data.store import check_collection_id
from joulecast.data.workload import Workload
from joulecast.data.workload_ref import RUNNER_EAGER_FAMILIES, as_run, catalog_ref, kernel_ref

PLAN_DIR = Path(__file__).parent / "plans"
# Seconds to set an item up before its warm-up (allocating tensors; building a model with random weights), used
# only for dry-run durations (assumption, checked against the first real collection).
SETUP_S = {"kernel": 0.3, "model": 4.0, "wait": 0.3}
WAIT_MODES = ("spin", "idle-context")


@dataclass(frozen=True)
class Settings:
    min_window_s: float = 1.0   # shortest measured window per repeat
    min_iterations: int = 5     # fewest iterations per window
    repeats: int = 3            # measured windows per item (at least 3: their spread is recorded)
    warmup_s: float = 0.5       # unmeasured running before the first window
    idle_s: float = 5.0         # idle power measured for this long before and after the collection

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Settings":
        known = {f: getattr(cls, f) for f in cls.__dataclass_fields__}
        extra = sorted(set(raw) - set(known))
        require(not extra, f"settings.{extra[0] if extra else ''}", f"unknown; allowed: {', '.join(known)}")
        values = {}
        for name, default in known.items():
            value = raw.get(name, default)
            kind = type(default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InputError(f"settings.{name}", f"must be a finite non-negative number, got {value!r}")
            values[name] = kind(value)
        require(values["repeats"] >= 3, "settings.repeats", f"must be at least 3, got {values['repeats']}")
        require(values["min_iterations"] >= 1, "settings.min_iterations", "must be at least 1")
        return cls(**values)


@dataclass(frozen=True)
class PlanItem:
    """One configuration to measure."""

    id: str                       # stable: the measurement id within the collection (resume key)
    kind: str                     # kernel, model or wait
    op: str | None                # kernel op (gemm, attention, ...) for kernels
    model: str | None             # catalog model for models
    phase: str | None
    batch: int | None
    seq: int | None
    dtype: str
    sizes: Mapping[str, Any] = field(default_factory=dict)       # kernel sizes
    overrides: Mapping[str, Any] = field(default_factory=dict)   # model config overrides
    workload_ref: str | None = None
    attention: str = "flash"      # a model's attention: flash (SDPA), eager (Hugging Face's) or masked (SDPA, a mask)


@dataclass(frozen=True)
class Plan:
    name: str
    gpu: str
    settings: Settings
    items: tuple[PlanItem, ...]
    source: str = ""


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _kernel_items(entry: Mapping[str, Any], where: str) -> list[PlanItem]:
    from joulecast.features.kernel_specs import KERNEL_OPS, check_kernel_spec

    require("op" in entry, f"{where}.op", f"missing ({', '.join(KERNEL_OPS)})")
    extra = sorted(set(entry) - {"op", "dtype", "grid", "shapes", "fixed"})
    require(not extra, f"{where}.{extra[0] if extra else ''}", "unknown key; allowed: op, dtype, grid, shapes, fixed")
    grid = entry.get("grid") or {}
    require(isinstance(grid, Mapping), f"{where}.grid", "must map size names to lists")
    require(isinstance(entry.get("fixed") or {}, Mapping), f"{where}.fixed", "must map size names to values")
    fixed = dict(entry.get("fixed") or {})
    raw_shapes = _as_list(entry.get("shapes") or [])
    require(all(isinstance(s, Mapping) for s in raw_shapes), f"{where}.shapes", "must be a list of size mappings")
    shapes = [dict(s) for s in raw_shapes]
    if grid:
        names = list(grid)
        shapes += [dict(zip(names, combo)) for combo in itertools.product(*(_as_list(grid[n]) for n in names))]
    require(bool(shapes), where, "needs 'grid' or 'shapes'")
    items = []
    dtypes = _as_list(entry.get("dtype", "bf16"))
    require(all(isinstance(d, str) for d in dtypes), f"{where}.dtype", f"must be a dtype or a list of them, got {dtypes!r}")
    for dtype in dtypes:
        for i, shape in enumerate(shapes):
            sizes = check_kernel_spec(entry["op"], {**fixed, **shape}, field=f"{where}.shapes[{i}]")
            ref = kernel_ref(entry["op"], **sizes, dtype=dtype)
            ident = f"{entry['op']}/" + "/".join(f"{k}{int(v)}" for k, v in sizes.items()) + f"/{dtype}"
            items.append(PlanItem(id=ident, kind="kernel", op=entry["op"], model=None, phase="kernel",
                                  batch=sizes.get("batch", 1), seq=sizes.get("seq_kv"), dtype=dtype, sizes=sizes,
                                  workload_ref=ref))
    return items


def _model_items(entry: Mapping[str, Any], where: str) -> list[PlanItem]:
    from joulecast.data.models import family, model_entry

    require("model" in entry, f"{where}.model", "missing (a catalog model name; see 'joulecast models')")
    extra = sorted(set(entry) - {"model", "phase", "batch", "seq", "dtype", "overrides", "attention"})
    require(not extra, f"{where}.{extra[0] if extra else ''}",
            "unknown key; allowed: model, phase, batch, seq, dtype, overrides, attention")
    require(isinstance(entry.get("overrides") or {}, Mapping), f"{where}.overrides", "must map config keys to values")
    overrides = dict(entry.get("overrides") or {})
    tag = "/cfg" + hashlib.sha256(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:8] if overrides else ""
    items = []
    for model, phase, batch, seq, dtype, attention in itertools.product(
            *(_as_list(entry.get(k, d)) for k, d in (("model", None), ("phase", "prefill"), ("batch", 1),
                                                       ("seq", 512), ("dtype", "bf16"), ("attention", "flash")))):
        batch, seq = whole_number(batch), whole_number(seq)  # 1e3 or 1024.0, as YAML reads a count written so
        spec = model_entry(model)
        name = spec["name"]
        require_choice(attention, ("flash", "eager", "masked"), f"{where}.attention")
        if attention == "eager":
            require(family(spec["config"]) in RUNNER_EAGER_FAMILIES and phase == "prefill", f"{where}.attention",
                    f"eager runs prefill of {', '.join(sorted(RUNNER_EAGER_FAMILIES))} models, not {phase} of {name}")
        if attention == "masked":  # the runner's masked path is Llama's (transformers 4.38-4.39), in prefill
            require(family(spec["config"]) == "llama" and phase == "prefill", f"{where}.attention",
                    f"masked runs prefill of llama-style models, not {phase} of {name}")
        ref = None if overrides else as_run(catalog_ref(name, phase=phase, batch=batch, seq=seq, dtype=dtype,
                                                         attention=attention))
        suffix = "" if attention == "flash" else f"/{attention}"
        items.append(PlanItem(id=f"{name}/{phase}/b{batch}/s{seq}/{dtype}{suffix}{tag}", kind="model", op=None,
                              model=name, phase=phase, batch=batch, seq=seq, dtype=dtype, overrides=overrides,
                              workload_ref=ref, attention=attention))
    return items


def _wait_items(entry: Mapping[str, Any], where: str) -> list[PlanItem]:
    extra = sorted(set(entry) - {"mode", "us"})
    require(not extra, f"{where}.{extra[0] if extra else ''}", "unknown key; allowed: mode, us")
    items = []
    for mode, us in itertools.product(_as_list(entry.get("mode", "spin")), _as_list(entry.get("us", 1000))):
        us = whole_number(us)
        require_choice(mode, WAIT_MODES, f"{where}.mode")
        require(isinstance(us, int) and not isinstance(us, bool) and 10 <= us <= 10**6, f"{where}.us",
                f"must be whole microseconds from 10 to 1,000,000, got {us!r}")
        items.append(PlanItem(id=f"wait/{mode}/us{us}", kind="wait", op=mode, model=None, phase="wait", batch=1,
                              seq=None, dtype="fp32", sizes={"us": us}))
    return items


def item_workload(item: PlanItem) -> Workload:
    """The physics-ready workload of a plan item (validates the item's fields); a wait has none."""
    require(item.kind != "wait", "item", f"{item.id} is a wait: it has no workload")
    if item.kind == "kernel":
        from joulecast.features.kernel_specs import kernel_workload

        return kernel_workload(item.op or "", dtype=item.dtype, **item.sizes)
    from joulecast.data.models import family, model_entry
    from joulecast.data.workload_ref import RUNNER_FUSIONS
    from joulecast.features.lowering import workload

    entry = model_entry(item.model or "")
    config = {**entry["config"], **item.overrides, "name": entry["name"]}
    # the kernels the runner runs: its attention, and its fusions where it runs the model its own way (`as_run`)
    fusions = () if item.attention == "eager" else tuple(filter(None, [RUNNER_FUSIONS.get(family(config))]))
    return workload(config, phase=item.phase or "prefill", batch=item.batch or 1, seq=item.seq, dtype=item.dtype,
                    attention=item.attention, fusions=fusions)


def parse_plan(raw: Mapping[str, Any], source: str = "plan") -> Plan:
    """Build a plan from its mapping; errors name the field (e.g. `models[1].phase`)."""
    require(isinstance(raw, Mapping), "plan", f"{source} must hold a YAML mapping")
    extra = sorted(set(raw) - {"name", "gpu", "settings", "kernels", "models", "waits", "description"})
    require(not extra, extra[0] if extra else "",
            "unknown plan key; allowed: name, gpu, settings, kernels, models, waits, description")
    require(isinstance(raw.get("name"), str) and raw["name"].strip() != "", "name", "the collection id is missing")
    check_collection_id(raw["name"], "name")  # it names the store's folder
    from joulecast.data.gpus import gpu as catalog_gpu

    gpu = catalog_gpu(str(raw.get("gpu", ""))).name
    require(isinstance(raw.get("settings") or {}, Mapping), "settings", "must map setting names to numbers")
    settings = Settings.from_dict(raw.get("settings") or {})
    items: list[PlanItem] = []
    checked: set[str] = set()  # items whose workload was built (an item asked for twice is built once)
    for section, parse in (("kernels", _kernel_items), ("models", _model_items), ("waits", _wait_items)):
        entries = raw.get(section) or []
        require(isinstance(entries, list), section, "must be a list of entries")
        for i, entry in enumerate(entries):
            require(isinstance(entry, Mapping), f"{section}[{i}]", "must be a mapping of keys")
            with fields_under(f"{section}[{i}]"):  # a lowering's error names the entry that asked for it
                parsed = parse(entry, f"{section}[{i}]")
                for it in parsed:
                    if it.kind != "wait" and it.id not in checked:
                        item_workload(it)  # fail at load time, not hours into a collection
                        checked.add(it.id)
            items += parsed
    require(bool(items), "kernels", "the plan has no kernels, models or waits")
    seen: set[str] = set()
    unique = [it for it in items if not (it.id in seen or seen.add(it.id))]
    return Plan(name=raw["name"], gpu=gpu, settings=settings, items=tuple(unique), source=source)


def load_plan(path: str | Path) -> Plan:
    """Read a plan file (or a shipped plan by name, e.g. `h200-first`)."""
    path = Path(path)
    if not path.exists() and (PLAN_DIR / f"{path.name}.yaml").exists():
        path = PLAN_DIR / f"{path.name}.yaml"
    if not path.exists():
        shipped = ", ".join(p.stem for p in sorted(PLAN_DIR.glob("*.yaml")))
        raise InputError("PLAN", f"{path} does not exist (shipped plans: {shipped or 'none'})")
    text = read_text(path, "PLAN")
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        raise InputError("PLAN", f"{path} is not valid YAML ({exc.__class__.__name__})") from None
    return parse_plan(raw, source=str(path))


@dataclass(frozen=True)
class ItemEstimate:
    item: PlanItem
    physics_time_s: float       # per iteration
    physics_energy_j: float
    iterations: int             # per window
    seconds: float              # expected wall time of the item (setup, warm-up, windows)


def expected_durations(plan: Plan, items: Sequence[PlanItem] | None = None) -> list[ItemEstimate]:
    """What each item will cost on the plan's GPU, from the physics estimate (the `--dry-run` figures)."""
    from joulecast.estimator.api import estimate

    s = plan.settings
    out = []
    for item in items if items is not None else plan.items:
        if item.kind == "wait":  # a launch lasts what it says; its energy is what the row measures
            time_s, energy_j = item.sizes["us"] * 1e-6, float("nan")
        else:
            est = estimate(item_workload(item), plan.gpu, estimator="physics")  # no xgboost (the GPU machine has none)
            time_s, energy_j = est.time_s, est.energy_j
        n = max(s.min_iterations, math.ceil(s.min_window_s / time_s))
        seconds = SETUP_S[item.kind] + s.warmup_s + s.repeats * n * time_s
        out.append(ItemEstimate(item, time_s, energy_j, n, seconds))
    return out
