"""The `Workload` record: what to estimate, as a kernel table plus where it came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from joulecast.data.kernels import as_columns, kernel_table_hash

PHASES = ("prefill", "decode", "training", "inference")
LAUNCH_MODES = ("eager", "graph")


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload lowered to kernels.

    Attributes:
        name: a readable identity, e.g. ``gpt2/prefill/b8/s512/bf16``.
        columns: the kernel table (`joulecast.data.kernels.KERNEL_COLUMNS`), one numpy array per column; `kernels`
            gives it as a DataFrame.
        model: catalog model or config name, where known.
        phase: prefill, decode, training or inference (vision models).
        batch, seq: batch size and sequence length (tokens; context length for decode).
        dtype: the compute dtype.
        source: ``catalog``, ``config`` or ``kernel-list``.
        launch_mode: ``eager`` (one host dispatch per kernel, as in PyTorch eager) or ``graph`` (CUDA graphs).
        engine: the serving engine whose own host work runs between steps (`joulecast.features.arch.SERVING_ENGINES`),
            or None for the kernels alone.
    """

    name: str
    columns: Mapping[str, np.ndarray] = field(compare=False, repr=False)
    model: str | None = None
    phase: str | None = None
    batch: int | None = None
    seq: int | None = None
    dtype: str | None = None
    source: str = "catalog"
    launch_mode: str = "eager"
    engine: str | None = None
    _frame: list = field(default_factory=list, compare=False, repr=False)  # the DataFrame, once built

    @classmethod
    def from_table(cls, table: pd.DataFrame | Mapping[str, np.ndarray], **fields: object) -> "Workload":
        return cls(columns=as_columns(table), **fields)  # type: ignore[arg-type]

    @property
    def kernels(self) -> pd.DataFrame:
        """The kernel table as a DataFrame (built on first use)."""
        if not self._frame:
            self._frame.append(pd.DataFrame(self.columns))
        return self._frame[0]

    @property
    def kernel_hash(self) -> str:
        return kernel_table_hash(self.kernels)

    @property
    def kernel_count(self) -> int:
        """Kernel launches in one pass (the sum of counts)."""
        return int(self.columns["count"].sum())
