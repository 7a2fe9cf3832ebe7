"""The GPU catalog: one YAML file per GPU under `data/gpus/`, each number with its source.

Loaded once, validated at the door (`GpuSpec.from_dict`), then trusted by every later stage.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping

import yaml

from joulecast.data import architectures
from joulecast.data.architectures import expand_sources
from joulecast.data.errors import (DataError, InputError, JoulecastError, UnknownNameError, choice_message,
                                   hyphenated, is_choice, require)
from joulecast.data.files import check_output_folder, kind_of, load_yaml, read_text, write_atomic

log = logging.getLogger(__name__)

GPU_DIR = Path(__file__).parent / "gpus"

TENSOR_DTYPES = ("fp64", "tf32", "bf16", "fp16", "fp8", "int8")
CUDA_DTYPES = ("fp64", "fp32")

_REQUIRED_NUMBERS = (
    "sm_count", "boost_clock_mhz", "tensor_peak_clock_mhz", "memory_gb", "memory_bandwidth_gbs",
    "memory_clock_mhz", "memory_bus_bits", "l2_mb", "power_limit_w", "idle_power_w",
)
_OPTIONAL_NUMBERS = ("base_clock_mhz", "idle_power_max_clock_w", "tensor_gemm_efficiency", "power_limit_min_w",
                     "power_limit_max_w")
# Physical bounds, generous around today's parts (the B200: 148 SMs, 1,965 MHz, 180 GB at 7.7 TB/s, 126 MB of L2,
# 1,000 W, 4,500 dense fp8 TFLOP/s; data/gpus/b200.yaml, each figure sourced there): a number outside them is a
# typo or a unit slip (GB/s given as MB/s), not a GPU.
_RANGES = {"sm_count": (1, 2048), "boost_clock_mhz": (100, 10_000), "tensor_peak_clock_mhz": (100, 10_000),
           "base_clock_mhz": (50, 10_000), "memory_gb": (1, 10_000), "memory_bandwidth_gbs": (10, 200_000),
           "memory_clock_mhz": (100, 100_000), "memory_bus_bits": (32, 32_768), "l2_mb": (0.1, 10_000),
           "power_limit_w": (5, 10_000), "power_limit_min_w": (5, 10_000), "power_limit_max_w": (5, 10_000),
           "idle_power_w": (0.5, 5_000), "idle_power_max_clock_w": (0.5, 5_000),
           "tensor_gemm_efficiency": (0.05, 1.0)}
_MAX_TFLOPS = 100_000.0

# The link classes (data/distributed/links.yaml) that join a node's GPUs: `GpuSpec.peer_link`; a spec that names
# none takes its architecture's here: the NVLink generation of its SXM parts (shared/reference/gpus.md), PCIe 4 on
# Ada, whose cards have no NVLink (L4, L40S: gpus.md [9][10]).
PEER_LINKS = ("nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie3", "pcie4", "pcie5")
ARCHITECTURE_PEER_LINK = {"volta": "nvlink2", "ampere": "nvlink3", "ada": "pcie4", "hopper": "nvlink4",
                          "blackwell": "nvlink5"}

# When a GPU's idle power is known only at one clock, idle at the maximum clock is taken as 1.5x that:
# the EnergAIzer DVFS idle tables give 67.3/44.5 = 1.51 (A100-PCIe) and 120/75 = 1.6 (H100 SXM),
# via shared/reference/gpus.md [18].
IDLE_MAX_CLOCK_RATIO = 1.5


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU's datasheet numbers (SI-ish units in the names) and the source of each."""

    name: str
    display_name: str
    architecture: str
    compute_capability: str
    sm_count: int
    boost_clock_mhz: float
    tensor_peak_clock_mhz: float
    memory_type: str
    memory_gb: float
    memory_bandwidth_gbs: float
    memory_clock_mhz: float
    memory_bus_bits: int
    l2_mb: float
    tensor_tflops: Mapping[str, float]
    cuda_tflops: Mapping[str, float]
    power_limit_w: float
    idle_power_w: float
    idle_power_max_clock_w: float
    base_clock_mhz: float | None = None
    # The fraction of the tensor peak a long-K cuBLAS GEMM reaches at the clock it runs, where one is measured for
    # the chip; others take `features.arch.GEMM_EFFICIENCY` (`features.kinds.gemm.efficiency`).
    tensor_gemm_efficiency: float | None = None
    # Measured idle power at locked SM clocks, ((MHz, W), ...) rising in clock, where a DVFS table exists: idle power
    # between its clocks is read from it, not from the default DVFS shape (`joulecast.features.power`).
    idle_power_table: tuple[tuple[float, float], ...] = ()
    # The range a power limit can be set in (`nvidia-smi -q`'s Min / Max Power Limit) where a source gives an end:
    # unknown, the most is the default (every datasheet row of shared/reference/gpus.md gives max = default), and
    # the least anything above idle at the maximum clock (`power_limit_range_w`).
    power_limit_min_w: float | None = None
    power_limit_max_w: float | None = None
    # The link a node's GPUs reach each other by with no added hardware, a class of data/distributed/links.yaml that
    # tensor parallelism's all-reduces and a site's default intra-node link take: NVLink on SXM boards, the card's
    # PCIe generation on PCIe cards (an NVLink bridge, which the A100-PCIe, H100-PCIe and A40 take, joins pairs only
    # and is not assumed); a spec that names none, its architecture's (ARCHITECTURE_PEER_LINK).
    peer_link: str = "nvlink4"
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    # A hypothetical GPU's (`hypothetical`): the catalog GPU it scales, whose learned correction its estimates take
    # where that GPU runs the same setting (`features.physics.what_if_base`); None on a real GPU.
    what_if_of: str | None = None

    @property
    def l2_bytes(self) -> float:
        return self.l2_mb * 2**20

    @property
    def power_limit_range_w(self) -> tuple[float, float]:
        """(least, most) power limit an estimate takes: the card's settable range where sourced; else the default
        at most, and at least idle at the maximum clock (exclusive: a cap there leaves no power to run on)."""
        return (max(self.power_limit_min_w or 0.0, self.idle_power_max_clock_w),
                max(self.power_limit_max_w or self.power_limit_w, self.power_limit_w))

    @property
    def power_limit_text(self) -> str:
        """The power limits the card takes as a reader checks one: 'above 122 and at most 700 W' where the least is
        idle at the maximum clock (exclusive), else 'between 200 and 700 W'."""
        low, high = self.power_limit_range_w
        exclusive = not self.power_limit_allowed(low)
        return f"{'above' if exclusive else 'between'} {low:g} and {'at most ' if exclusive else ''}{high:g} W"

    @property
    def power_limit_whole_range_w(self) -> tuple[int, int]:
        """(least, most) whole watts the card takes as a limit, both allowed: what a sweep's "range" spreads over
        (`power_limit_range_w` rounded inwards, past its least where that is idle at the maximum clock, exclusive)."""
        low, high = self.power_limit_range_w
        least = math.ceil(low)
        return least + (not self.power_limit_allowed(least)), math.floor(high)

    def power_limit_allowed(self, limit_w: Any) -> Any:
        """Where `limit_w` (W: a number or an array of them) is a power limit the card takes (`power_limit_range_w`)."""
        low, high = self.power_limit_range_w
        return (limit_w > self.idle_power_max_clock_w) & (limit_w >= low) & (limit_w <= high)  # idle: exclusive

    @property
    def memory_bandwidth_bps(self) -> float:
        """Peak DRAM bandwidth in bytes per second."""
        return self.memory_bandwidth_gbs * 1e9

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], origin: str = "<dict>") -> "GpuSpec":
        """Validate a catalog entry; every problem names the file and the field."""

        def fail(field_name: str, msg: str) -> DataError:
            return DataError(f"{origin}: field '{field_name}': {msg}")

        if not isinstance(raw, Mapping):
            raise DataError(f"{origin}: expected a mapping of fields, got {kind_of(raw)}")
        for key in ("name", "display_name", "architecture", "compute_capability", "memory_type"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise fail(key, "missing or not a non-empty string")
        if raw["architecture"] not in architectures.catalog():
            raise fail("architecture", f"{raw['architecture']!r} is not one of {', '.join(architectures.catalog())} "
                                       "(data/architectures/*.yaml)")
        numbers: dict[str, float | None] = {}
        for key in _REQUIRED_NUMBERS + _OPTIONAL_NUMBERS:
            value = raw.get(key)
            if value is None and key in _OPTIONAL_NUMBERS:
                numbers[key] = None
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise fail(key, f"missing or not a number (got {value!r})")
            if not value > 0:
                raise fail(key, f"must be positive, got {value}")
            low, high = _RANGES[key]
            if not low <= value <= high:
                raise fail(key, f"must be between {low:g} and {high:g} (a physical bound), got {value:g}")
            numbers[key] = float(value)
        if numbers["tensor_peak_clock_mhz"] > numbers["boost_clock_mhz"]:
            raise fail("tensor_peak_clock_mhz", "cannot exceed boost_clock_mhz")
        if numbers["base_clock_mhz"] and numbers["base_clock_mhz"] > numbers["boost_clock_mhz"]:
            raise fail("base_clock_mhz", "cannot exceed boost_clock_mhz")
        if numbers["idle_power_w"] >= numbers["power_limit_w"]:
            raise fail("idle_power_w", f"must be below power_limit_w ({numbers['idle_power_w']:g} W against "
                                       f"{numbers['power_limit_w']:g} W)")
        if (numbers["power_limit_min_w"] or 0) > numbers["power_limit_w"]:
            raise fail("power_limit_min_w", "cannot exceed power_limit_w (the default limit)")
        if (numbers["power_limit_max_w"] or math.inf) < numbers["power_limit_w"]:
            raise fail("power_limit_max_w", "cannot be under power_limit_w (the default limit)")
        peaks = {}
        for key, allowed in (("tensor_tflops", TENSOR_DTYPES), ("cuda_tflops", CUDA_DTYPES)):
            table = raw.get(key)
            if not isinstance(table, Mapping) or (key == "cuda_tflops" and "fp32" not in table):
                raise fail(key, "missing; a mapping of dtype to dense TFLOP/s" + (" with fp32" if key == "cuda_tflops" else ""))
            for dtype, value in table.items():
                if dtype not in allowed:
                    raise fail(f"{key}.{dtype}", choice_message(dtype, allowed, "dtype"))
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= _MAX_TFLOPS:
                    raise fail(f"{key}.{dtype}", f"must be a number in (0, {_MAX_TFLOPS:g}] TFLOP/s, got {value!r}")
            peaks[key] = MappingProxyType({d: float(v) for d, v in table.items()})
        sources = expand_sources(raw.get("sources"), origin)
        cited = set(numbers) | {"tensor_tflops", "cuda_tflops", "architecture", "compute_capability", "memory_type"}
        missing = sorted(k for k in cited if k not in sources and (numbers.get(k) is not None or k not in numbers))
        if missing:
            raise fail("sources", f"no source given for {', '.join(missing)}")
        peer_link = raw.get("peer_link")
        if peer_link is not None and not is_choice(peer_link, PEER_LINKS):
            raise fail("peer_link", choice_message(peer_link, PEER_LINKS))
        if peer_link is not None and "peer_link" not in sources:
            raise fail("sources", "no source given for peer_link")
        aliases = raw.get("aliases") or []
        aliases = [aliases] if isinstance(aliases, str) else aliases  # one alias written alone, not its letters
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
            raise fail("aliases", f"a list of names, got {kind_of(raw.get('aliases'))}")
        idle_max = numbers["idle_power_max_clock_w"] or numbers["idle_power_w"] * IDLE_MAX_CLOCK_RATIO
        table = _idle_table(raw.get("idle_power_table"), numbers, fail)
        if table and "idle_power_table" not in sources:
            raise fail("sources", "no source given for idle_power_table")
        return cls(
            name=raw["name"], display_name=raw["display_name"], architecture=raw["architecture"],
            compute_capability=str(raw["compute_capability"]), sm_count=int(numbers["sm_count"]),
            boost_clock_mhz=numbers["boost_clock_mhz"], tensor_peak_clock_mhz=numbers["tensor_peak_clock_mhz"],
            memory_type=raw["memory_type"], memory_gb=numbers["memory_gb"],
            memory_bandwidth_gbs=numbers["memory_bandwidth_gbs"], memory_clock_mhz=numbers["memory_clock_mhz"],
            memory_bus_bits=int(numbers["memory_bus_bits"]), l2_mb=numbers["l2_mb"],
            tensor_tflops=peaks["tensor_tflops"], cuda_tflops=peaks["cuda_tflops"],
            power_limit_w=numbers["power_limit_w"], idle_power_w=numbers["idle_power_w"],
            idle_power_max_clock_w=min(idle_max, numbers["power_limit_w"]), base_clock_mhz=numbers["base_clock_mhz"],
            tensor_gemm_efficiency=numbers["tensor_gemm_efficiency"], idle_power_table=table,
            power_limit_min_w=numbers["power_limit_min_w"], power_limit_max_w=numbers["power_limit_max_w"],
            peer_link=peer_link or ARCHITECTURE_PEER_LINK.get(raw["architecture"], "nvlink4"),
            aliases=tuple(aliases), sources=MappingProxyType(sources),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain, YAML-ready form (the inverse of `from_dict`)."""
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["tensor_tflops"], out["cuda_tflops"] = dict(self.tensor_tflops), dict(self.cuda_tflops)
        out["sources"], out["aliases"] = dict(self.sources), list(self.aliases)
        out["idle_power_table"] = {mhz: w for mhz, w in self.idle_power_table} or None
        for derived in ("idle_power_max_clock_w", "peer_link"):  # from idle_power_w or the architecture, not cited
            if derived not in self.sources:
                out[derived] = None
        del out["what_if_of"]  # a hypothetical's, not a catalog entry's
        return out


def _idle_table(raw: Any, numbers: Mapping[str, float | None], fail: Any) -> tuple[tuple[float, float], ...]:
    """A catalog entry's `idle_power_table` (MHz -> W) checked: clocks up to the boost clock, watts below the power
    limit; sorted by clock."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or len(raw) < 2:
        raise fail("idle_power_table", "must map at least two SM clocks (MHz) to idle power (W)")
    table = []
    for mhz, watts in raw.items():
        if isinstance(mhz, bool) or isinstance(watts, bool) or not isinstance(mhz, (int, float)) \
                or not isinstance(watts, (int, float)):
            raise fail(f"idle_power_table.{mhz}", f"clock and power must be numbers, got {mhz!r}: {watts!r}")
        if not 0 < mhz <= numbers["boost_clock_mhz"]:
            raise fail(f"idle_power_table.{mhz}", f"the clock must be in (0, {numbers['boost_clock_mhz']:g}] MHz")
        if not 0 < watts < numbers["power_limit_w"]:
            raise fail(f"idle_power_table.{mhz}", f"idle power must be in (0, {numbers['power_limit_w']:g}) W, "
                                                  f"got {watts:g}")
        table.append((float(mhz), float(watts)))
    return tuple(sorted(table))


def load_gpu_file(path: str | Path) -> GpuSpec:
    """Load and validate one GPU spec YAML file."""
    path = Path(path)
    text = read_text(path, "gpu spec")
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    return GpuSpec.from_dict(raw, origin=str(path))


def user_gpu_dir() -> Path:
    """Where `joulecast gpu add` keeps spec files: $JOULECAST_HOME/gpus (default ~/.joulecast/gpus)."""
    return Path(os.environ.get("JOULECAST_HOME") or Path.home() / ".joulecast") / "gpus"


@functools.cache
def catalog() -> Mapping[str, GpuSpec]:
    """All GPUs by canonical name: the shipped ones, then those added with `joulecast gpu add`. An added file that does
    not load, or whose name or alias another GPU has, is skipped with a warning naming it (`skipped_gpu_files`): one
    broken file in the user catalog leaves every other GPU usable."""
    shipped = {s.name: s for s in (load_gpu_file(p) for p in sorted(GPU_DIR.glob("*.yaml")))}
    taken = {alias.lower(): s.name for s in shipped.values() for alias in (s.name, *s.aliases)}
    added = {}
    _SKIPPED.clear()
    for path in sorted(user_gpu_dir().glob("*.yaml")):
        try:
            spec = load_gpu_file(path)
            own = {spec.name, *(a.lower() for a in spec.aliases)}
            if own & taken.keys():
                clash = min(own & taken.keys(), key=lambda c: (c != spec.name, c))
                raise DataError(f"{path}: field '{'name' if clash == spec.name else 'aliases'}': {clash!r} is already "
                                f"in the catalog as {taken[clash]!r}; remove the file or rename it")
        except JoulecastError as exc:
            _SKIPPED[path.stem] = f"{exc}"
            log.warning(f"skipped a GPU you added: {exc} (fix the file, or run 'joulecast gpu remove {path.stem}')")
            continue
        added[spec.name] = spec
        taken.update(dict.fromkeys(own, spec.name))
    return MappingProxyType({**shipped, **added})


_SKIPPED: dict[str, str] = {}  # file stem -> why the user catalog's file was skipped (`catalog`)


def skipped_gpu_files() -> Mapping[str, str]:
    """The user catalog's files that `catalog` skipped, by file stem (the name `gpu remove` takes), with why."""
    catalog()
    return MappingProxyType(dict(_SKIPPED))


def reload_catalog() -> None:
    """Forget the loaded catalog (after a GPU is added or removed)."""
    hypothetical.cache_clear()
    catalog.cache_clear()
    _alias_index.cache_clear()


# An added GPU's name, which names its file in the user catalog: no separator, no leading dot.
ADDED_NAME = r"[a-z0-9][a-z0-9._-]*"


def added_gpus() -> list[str]:
    """The user catalog's files by the name `remove_gpu` takes (a file that does not load included)."""
    return sorted(p.stem for p in user_gpu_dir().glob("*.yaml"))


def add_gpu(path: str | Path, replace: bool = False) -> GpuSpec:
    """Validate a spec file and add it to the user catalog; its name and aliases may not clash with another GPU."""
    spec = load_gpu_file(path)
    if not re.fullmatch(ADDED_NAME, spec.name):
        raise InputError("name", f"{spec.name!r}: use lower-case letters, digits, '.', '_' and '-' (it names a file)")
    target = user_gpu_dir() / f"{spec.name}.yaml"
    own = {spec.name, *[a.lower() for a in spec.aliases]}
    for other in catalog().values():
        if other.name == spec.name and target.exists() and replace:
            continue
        clash = own & {other.name, *[a.lower() for a in other.aliases]}
        if clash:
            hint = " (pass --replace to update a GPU you added)" if target.exists() else ""
            first = min(clash, key=lambda c: (c != spec.name, c))  # its own name first, else an alias
            raise InputError("name" if first == spec.name else "aliases",
                             f"{first!r} is already in the catalog as {other.name!r}{hint}")
    if target.exists() and not replace:  # a file the catalog skips (`catalog`) is not overwritten unasked
        raise InputError("name", f"{spec.name!r} is already added as {target}, which does not load; pass --replace "
                                 "to overwrite it")
    check_output_folder(target.parent, "JOULECAST_HOME")  # the user catalog's folder: $JOULECAST_HOME/gpus
    write_atomic(target, lambda tmp: tmp.write_text(Path(path).read_text()))
    reload_catalog()
    return spec


def remove_gpu(name: str) -> Path:
    """Remove a GPU added with `add_gpu` (shipped GPUs cannot be removed)."""
    target = user_gpu_dir() / f"{name}.yaml"
    # a name that is no file name of the user catalog ('../x') is refused, not followed out of it
    if not re.fullmatch(ADDED_NAME, name) or not target.exists():
        raise InputError("name", f"{name!r} is not a GPU you added; added: {', '.join(added_gpus()) or 'none'}")
    target.unlink()
    reload_catalog()
    return target


@functools.cache
def _alias_index() -> Mapping[str, str]:
    index = {}
    for spec in catalog().values():
        for alias in (spec.name, *spec.aliases):
            index[alias.lower()] = spec.name
    return MappingProxyType(index)


# Words a board's name may open with, as nvidia-smi and NVML report it ("NVIDIA A100-SXM4-80GB",
# "Tesla V100-PCIE-16GB"), that no catalog name carries
_MAKER_WORDS = ("nvidia-", "tesla-")


def _spellings(key: str) -> Iterator[str]:
    """A lower-case GPU name as given, then with its spaces and underscores as hyphens, then without a maker's word
    before it: "NVIDIA H100 PCIe" is h100-pcie, as nvidia-smi's names are the catalog's written otherwise (lazily:
    a catalog name, the common case, costs one look-up)."""
    yield key
    dashed = hyphenated(key)
    yield dashed
    yield from (dashed[len(w):] for w in _MAKER_WORDS if dashed.startswith(w))


# A what-if's factor lies below this: a coarse check before the fields' own physical bounds, which any field scaled
# this far has long left.
MAX_SCALE_FACTOR = 1e3
# What a hypothetical GPU may scale (`gpu("h100-sxm:memory_bandwidth_gbs*2")`), and what scales with it: more SMs or
# a faster clock raise the peaks in proportion (a peak is SMs x per-SM rate x clock).
SCALABLE = {"sm_count": ("sm_count", "tensor_tflops", "cuda_tflops"),
            "clock": ("boost_clock_mhz", "tensor_peak_clock_mhz", "base_clock_mhz", "tensor_tflops", "cuda_tflops"),
            "memory_bandwidth_gbs": ("memory_bandwidth_gbs",), "l2_mb": ("l2_mb",), "memory_gb": ("memory_gb",),
            "power_limit_w": ("power_limit_w", "power_limit_min_w", "power_limit_max_w")}


@functools.lru_cache(maxsize=256)
def hypothetical(name: str) -> GpuSpec:
    """A catalog GPU with specs scaled, named `BASE:FIELD*FACTOR[:FIELD*FACTOR...]` (fields: SCALABLE), or set,
    `FIELD=VALUE` (`h200:memory_bandwidth_gbs=8000`: the factor that takes the field's first key, SCALABLE, there),
    for what-ifs; validated as any spec (physical bounds included). A power limit scaled is the card's rating: its
    chip's budget follows it as every catalog card's does (`features.power.power_w`); to cap the card itself, its
    estimate's power limit. Its estimates take its base's learned correction where the base runs the same setting
    (`features.physics.what_if_base`)."""
    base, *changes = name.split(":")
    real = gpu(base)
    raw = real.to_dict()
    for change in changes:
        field_name, op, given = re.fullmatch(r"([^*=]*)([*=]?)(.*)", change, re.S).groups()  # always matches
        if field_name not in SCALABLE or not op:
            raise InputError("gpu", f"{change!r} in {name!r}: give FIELD*FACTOR or FIELD=VALUE with FIELD one of "
                                    f"{', '.join(SCALABLE)}")
        try:
            number = float(given)
        except ValueError:
            number = float("nan")
        # a value set is the factor that takes the field's first key there (its peaks and idle curve follow, as a
        # factor's do), within the same bound
        primary = SCALABLE[field_name][0]
        now = float(raw[primary])
        value = number / now if op == "=" else number
        if not 0 < value < MAX_SCALE_FACTOR:
            what = (f"the value must be a positive number below {MAX_SCALE_FACTOR:g}x {base}'s {now:g}" if op == "="
                    else f"the factor must be a positive number below {MAX_SCALE_FACTOR:g}")
            raise InputError("gpu", f"{change!r} in {name!r}: {what}, got {given!r}")
        if primary == "sm_count":  # whole SMs, and the peaks scaled by the SMs there are (73 of 72, not 1.01x)
            value = round(now * value) / now
            require(value > 0, "gpu", f"{change!r} in {name!r}: leaves {base} no SM")
        for key in SCALABLE[field_name]:
            if isinstance(raw.get(key), dict):
                raw[key] = {dtype: peak * value for dtype, peak in raw[key].items()}
            elif raw.get(key) is not None:
                raw[key] = round(raw[key] * value) if key == "sm_count" else raw[key] * value
        if op == "=" and primary != "sm_count":  # the value as given, not its factor's product (8000, not 7999.99...)
            raw[primary] = number
        if field_name == "clock" and raw.get("idle_power_table"):  # the measured idle curve moves with the clocks
            raw["idle_power_table"] = {mhz * value: w for mhz, w in raw["idle_power_table"].items()}
    # named by its base's catalog name ("a100" -> "a100-pcie-40gb:clock*0.9"), as every estimate names a GPU
    raw.update(name=":".join((real.name, *changes)), display_name=f"{raw['display_name']} ({', '.join(changes)})",
               aliases=[])
    try:
        spec = GpuSpec.from_dict(raw, origin=f"hypothetical GPU {name!r}")
    except DataError as exc:
        raise InputError("gpu", str(exc)) from None
    return dataclasses.replace(spec, what_if_of=real.name)


def gpu(name: str | GpuSpec) -> GpuSpec:
    """Look a GPU up by name or alias (case-insensitive); an unknown name lists close ones. `NAME:FIELD*FACTOR`
    names a hypothetical one (`hypothetical`)."""
    if isinstance(name, GpuSpec):
        return name
    key = str(name).strip().lower()
    if ":" in key:
        return hypothetical(key)
    for spelling in _spellings(key):
        if spelling in _alias_index():
            return catalog()[_alias_index()[spelling]]
    if key in skipped_gpu_files():  # its file is there but does not load: say why, not 'unknown'
        raise InputError("gpu", f"{name!r} was added, but its file is skipped: {_SKIPPED[key]}")
    raise UnknownNameError("gpu", name, _alias_index().keys(), "Run 'joulecast gpus' for their specs and aliases.",
                           listed=catalog().keys())
