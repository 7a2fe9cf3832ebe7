"""Importers for published measurement sets, by source name: each turns a folder into the measurement schema."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from joulecast.data.errors import require_choice
from joulecast.data.schema import validate_measurements


@dataclass(frozen=True)
class Importer:
    reader: Callable[[str | Path], pd.DataFrame]
    method: str       # how the source measured, for the dataset card
    example_path: str

    def read(self, path: str | Path) -> pd.DataFrame:
        """The source's rows in the measurement schema, checked as a store's part is (`validate_measurements`): a
        row whose time, energy or power is not positive names its file and line, at import, not in training's logs."""
        return validate_measurements(self.reader(path), origin=f"import of {path}")


def _registry() -> dict[str, Importer]:
    from joulecast.data.importers.energaizer import import_energaizer
    from joulecast.data.importers.mlenergy import import_mlenergy
    from joulecast.data.importers.nvdvfs import import_nvdvfs
    from joulecast.data.importers.zeus import import_zeus

    return {
        "energaizer": Importer(import_energaizer, "NVML power polled every 10 ms and integrated (PROVENANCE.md)",
                               "../shared/data/external/energaizer-artifact"),
        "mlenergy": Importer(import_mlenergy, "Zeus over the NVML energy counter, steady-state window (PROVENANCE.md)",
                             "../shared/data/external/mlenergy-v3"),
        "zeus": Importer(import_zeus, "Zeus NVML power sampling over one training epoch (PROVENANCE.md)",
                         "../shared/data/external/zeus-nsdi23-powerlimit"),
        "nvdvfs": Importer(import_nvdvfs, "board power sampled every 100 ms over 12 s, nvprof kernel time "
                                          "(PROVENANCE.md)", "../shared/data/external/nv-dvfs-benchmark-v100-rtx8000"),
    }


SOURCES = ("energaizer", "mlenergy", "zeus", "nvdvfs")


def importer(source: str) -> Importer:
    """The importer of a source name; an unknown name is an error listing the known ones."""
    require_choice(source, SOURCES, "SOURCE")
    return _registry()[source]


def import_source(source: str, path: str | Path) -> pd.DataFrame:
    """Import a published set: `import_source('zeus', '../shared/data/external/zeus-nsdi23-powerlimit')`."""
    return importer(source).read(path)
