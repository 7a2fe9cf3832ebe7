"""GPU architectures: the tile-level traits datasheets do not carry (tile shapes, residency, L2 bandwidth), one YAML
file per architecture under `data/architectures/`, each number with its source, validated at the door like the GPU
catalog."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from joulecast.data.errors import DataError, UnknownNameError

ARCH_DIR = Path(__file__).parent / "architectures"
_TILES = ("tc_tile", "simt_tile")
_COUNTS = ("tc_ctas_per_sm", "simt_ctas_per_sm", "threads_per_sm")


@dataclass(frozen=True, slots=True)
class ArchTraits:
    """Tile-level behaviour of one GPU architecture."""

    name: str
    code: float                       # compute capability of the family (the residual's `gpu_arch` feature)
    tc_tile: tuple[int, int, int]     # CTA tile (M, N, K in 16-bit elements) of a large tensor-core GEMM
    tc_ctas_per_sm: int               # resident tensor-core GEMM CTAs per SM
    simt_tile: tuple[int, int, int]   # CTA tile of a CUDA-core (SIMT) GEMM
    simt_ctas_per_sm: int
    threads_per_sm: int               # resident threads per SM (streaming kernels' residency)
    l2_bytes_per_clock: float         # L2 -> SM bandwidth, bytes per SM clock, whole GPU
    sources: Mapping[str, str]
    # CTAs of a tensor-core GEMM that share the operand along their tile's wide side, each loading its part from L2
    # (Blackwell's CTA pairs); 1 where each CTA loads its whole tile
    tc_cluster: int = 1

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], origin: str) -> "ArchTraits":
        """Validate one architecture file's content (`origin` names it in errors)."""
        def fail(name: str, message: str) -> DataError:
            return DataError(f"{origin}: field {name!r}: {message}")

        if not isinstance(raw, Mapping):
            raise DataError(f"{origin}: expected a mapping of fields")
        sources = expand_sources(raw.get("sources"), origin)
        values: dict[str, Any] = {}
        for name in (*_TILES, *_COUNTS, "code", "l2_bytes_per_clock"):
            value = raw.get(name)
            if name in _TILES:
                ok = isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) and v > 0 for v in value)
                if not ok:
                    raise fail(name, f"must be three positive integers [M, N, K], got {value!r}")
                value = tuple(value)
            elif name in _COUNTS:
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    raise fail(name, f"must be a positive integer, got {value!r}")
            elif not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1e6:
                raise fail(name, f"must be a positive number, got {value!r}")
            if name not in sources:
                raise fail("sources", f"no source given for {name}")
            values[name] = value
        cluster = raw.get("tc_cluster", 1)
        if not isinstance(cluster, int) or isinstance(cluster, bool) or not 1 <= cluster <= 16:
            raise fail("tc_cluster", f"must be an integer from 1 to 16 (CTAs a cluster), got {cluster!r}")
        if "tc_cluster" in raw and "tc_cluster" not in sources:
            raise fail("sources", "no source given for tc_cluster")
        if not isinstance(raw.get("name"), str) or not raw["name"]:
            raise fail("name", "must be the architecture's name")
        return cls(name=raw["name"], code=float(values.pop("code")), tc_cluster=cluster,
                   l2_bytes_per_clock=float(values.pop("l2_bytes_per_clock")), sources=MappingProxyType(sources),
                   **values)


def expand_sources(raw: Any, origin: str) -> dict[str, str]:
    """`sources` keys may list several fields separated by commas; expand them to one key each."""
    if not isinstance(raw, Mapping):
        raise DataError(f"{origin}: field 'sources': missing; map each field to its citation")
    out = {}
    for keys, citation in raw.items():
        for key in str(keys).split(","):
            out[key.strip()] = str(citation)
    return out


@functools.cache
def catalog() -> Mapping[str, ArchTraits]:
    """Every architecture, by name."""
    out = {}
    for path in sorted(ARCH_DIR.glob("*.yaml")):
        traits = ArchTraits.from_dict(yaml.safe_load(path.read_text()), str(path))
        out[traits.name] = traits
    return MappingProxyType(out)


def architecture(name: str) -> ArchTraits:
    known = catalog()
    if name not in known:
        raise UnknownNameError("architecture", name, known)
    return known[name]
