"""The `Workload` record: what to estimate, as a kernel table plus where it came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.files import check_count
from joulecast.data.kernels import as_columns, kernel_table_hash
from joulecast.data.labels import Labels

PHASES = ("prefill", "decode", "training", "inference")
LAUNCH_MODES = ("eager", "graph")
# The largest sizes accepted, so that no count overflows 64-bit integers: 2^24 sequences or tokens a sequence, and
# 2^31 tokens a pass (a trillion-parameter model's activations at that many tokens would fill thousands of GPUs; the
# memory check says where a workload stops fitting one).
MAX_SIZE = 2**24
# The highest and lowest input-pipeline rates a training run or a plan's job file may state, samples a second
# (`loader_rate`): far past any host's loader, and one sample in over a quarter of an hour, bounds on what a typo can
# ask for (a rate of 1e-311 made a run's time infinite)
MAX_LOADER_RATE = 1e9
MIN_LOADER_RATE = 1e-3
# A training run's or a plan's micro-batch given as this word: the largest that divides its batch and fits the GPU's
# memory (`joulecast.train_run`, a job file's `micro_batch`, each site its own)
AUTO_MICRO_BATCH = "auto"
# A generation's or a serving load's tensor-parallel GPUs given as this word: the fewest (1, 2, 4 or 8) whose shards
# fit each GPU's memory (`joulecast.generate`; `joulecast.serve`'s, and serve the load's rate)
AUTO_TP = "auto"


def is_auto_tp(tp: object) -> bool:
    """Whether `tp` is the word AUTO_TP (not a number, nor a number's text)."""
    return isinstance(tp, str) and tp == AUTO_TP
MAX_TOKENS = 2**31


def check_sizes(batch: object, seq: object, has_seq: bool = True) -> None:
    """Batch and sequence length (ignored where the model has none, `has_seq` False): integers from 1 to MAX_SIZE,
    with at most MAX_TOKENS tokens a pass; otherwise one InputError naming the field."""
    for name, value in (("batch", batch), ("seq", seq)):
        if name == "seq" and not has_seq:
            seq = None
            continue
        check_count(value, name, MAX_SIZE)
    if seq is not None and int(batch) * int(seq) > MAX_TOKENS:  # type: ignore[arg-type]
        raise InputError("batch", f"batch x seq = {int(batch) * int(seq):,} tokens a pass; at most {MAX_TOKENS:,}")


def check_size_columns(batch: np.ndarray, seq: np.ndarray | None) -> None:
    """`check_sizes`' limit on tokens a pass for columns of many configurations, naming the first row over it; each
    size is already a whole number from 1 to MAX_SIZE (`estimator.many` reads the columns so)."""
    if seq is not None and (too := batch.astype(np.float64) * seq > MAX_TOKENS).any():
        i = int(np.flatnonzero(too)[0])
        tokens = int(batch[i]) * int(seq[i])
        raise InputError("batch", f"row {i}: batch x seq = {tokens:,} tokens; at most {MAX_TOKENS:,}")


# The host dispatch a launch that a workload may state (s): from none to a millisecond, far above any measured host
# (several to tens of microseconds a launch through PyTorch eager).
MAX_HOST_DISPATCH_S = 1e-3
_UNITS_S = {"s": 1.0, "us": 1e-6}  # the units a host dispatch may be given in


def host_dispatch_outside(seconds: np.ndarray) -> np.ndarray:
    """Per value of a column of host dispatches (s), whether it lies outside 0-MAX_HOST_DISPATCH_S; NaN (none
    stated: the default) compares False, so it is allowed."""
    return (seconds < 0) | (seconds > MAX_HOST_DISPATCH_S)


def check_host_dispatch(value: float | None, field: str = "host_dispatch_s", unit: str = "s") -> float | None:
    """A stated host dispatch a launch, given in `unit` (s, or us as the CLI and the service take it), as seconds,
    checked: None, or a number from 0 to MAX_HOST_DISPATCH_S; the error names `field` in its own unit."""
    if value is None:
        return None
    scale = _UNITS_S[unit]
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not (
            0.0 <= value * scale <= MAX_HOST_DISPATCH_S):  # NaN fails the comparison
        raise InputError(field, f"must be from 0 to {MAX_HOST_DISPATCH_S / scale:g} {unit} a launch, got {value!r}")
    return float(value) * scale


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
        params: the model's weight elements (for its memory), None where unknown.
        host_dispatch_s: the host's time to dispatch one kernel launch in eager mode, where it is known for the
            machine (a collection's measured figure, or a user's); None for the default
            (`joulecast.features.arch.HOST_DISPATCH_S`). CUDA graphs dispatch nothing either way.
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
    params: int | None = None     # weight elements (None where unknown, as for a kernel list)
    host_dispatch_s: float | None = None
    _frame: list = field(default_factory=list, compare=False, repr=False)  # the DataFrame, once built
    # String columns already encoded where the table was built from codes: name -> (the column, its `Labels`),
    # read only while `columns` still holds that very array (`encoded_columns`)
    encoded: Mapping[str, tuple[np.ndarray, Labels]] = field(default_factory=dict, compare=False, repr=False)

    def encoded_columns(self) -> dict[str, np.ndarray | Labels]:
        """The kernel table's columns, each string column as its `Labels` where the table came with them."""
        columns = dict(self.columns)
        for name, (array, labels) in self.encoded.items():
            if columns.get(name) is array:
                columns[name] = labels
        return columns

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
