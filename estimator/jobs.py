"""Jobs above one pass: a generation (a prefill, then one decode step a token with the KV cache growing), estimated
as all its steps at once (`estimate_many` over the steps, whose lowering is one vectorised template evaluation).

Intervals: the steps of one job share their model's error offset (the residual's errors are those of one model on
one GPU, not independent draws), so a job's interval is the sum of its steps' lower bounds to the sum of their upper
bounds: the rule for errors that move together (comonotone), which never narrows with more steps as independent
errors would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.workload import MAX_SIZE
from joulecast.estimator.many import estimate_many


@dataclass(frozen=True, slots=True)
class GenerationEstimate:
    """A generation of `output_len` tokens after `input_len` prompt tokens, for each of `batch` sequences."""

    model: str
    gpu: str
    batch: int
    input_len: int
    output_len: int
    kv_cache: bool
    energy_j: float
    time_s: float
    power_w: float
    energy_interval_j: tuple[float, float] | None
    time_interval_s: tuple[float, float] | None
    ttft_s: float                     # time to first token: the prefill
    tpot_s: float                     # time per output token after the first: the mean decode step
    energy_per_output_token_j: float  # the job's energy over every sequence's output tokens
    energy_per_request_j: float       # the job's energy over its sequences
    prefill_energy_j: float
    decode_energy_j: float
    memory_gb: float                  # at the last step, the largest
    flags: tuple[str, ...] = ()
    method: str = "hybrid"
    steps: pd.DataFrame = field(default=None, compare=False, repr=False)  # each step's estimate

    def to_dict(self) -> dict[str, Any]:
        names = ("model", "gpu", "batch", "input_len", "output_len", "kv_cache", "energy_j", "time_s", "power_w",
                 "energy_interval_j", "time_interval_s", "ttft_s", "tpot_s", "energy_per_output_token_j",
                 "energy_per_request_j", "prefill_energy_j", "decode_energy_j", "memory_gb", "flags", "method")
        return {name: getattr(self, name) for name in names}


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_SIZE:
        raise InputError(name, f"must be an integer from 1 to {MAX_SIZE:,}, got {value!r}")
    return int(value)


def generate(model: str, gpu: str, *, batch: int = 1, input_len: int, output_len: int, dtype: str = "bf16",
             kv_cache: bool = True, attention: str = "flash", launch_mode: str = "eager", engine: str | None = None,
             sm_clock_mhz: float | None = None, power_limit_w: float | None = None,
             estimator: Any = None) -> GenerationEstimate:
    """Estimate a whole generation: the prompt's prefill, then `output_len - 1` decode steps (the prefill yields the
    first token), step t attending to `input_len + t` cached tokens. Without a KV cache (HF transformers'
    `use_cache=False`) every step is a forward pass over all tokens so far.

    Approximation: a step without a cache is lowered as a prefill, without the LM head on its last token (one
    vocabulary-wide GEMV against a forward pass over every token).

    Raises:
        InputError: naming the field that is wrong.
    """
    batch, input_len, output_len = (_positive(n, v) for n, v in (("batch", batch), ("input_len", input_len),
                                                                 ("output_len", output_len)))
    steps = np.arange(1, output_len)  # decode steps after the prefill's token
    if kv_cache:
        phases, seqs = ["prefill"] + ["decode"] * len(steps), np.concatenate([[input_len], input_len + steps - 1])
    else:
        phases, seqs = ["prefill"] * (1 + len(steps)), np.concatenate([[input_len], input_len + steps])
    frame = pd.DataFrame({"model": model, "gpu": gpu, "phase": phases, "batch": batch, "seq": seqs, "dtype": dtype,
                          "attention": attention, "launch_mode": launch_mode, "engine": engine or "",
                          "sm_clock_mhz": np.nan if sm_clock_mhz is None else sm_clock_mhz,
                          "power_limit_w": np.nan if power_limit_w is None else power_limit_w})
    if not kv_cache:
        frame["engine"] = ""  # a serving engine keeps a cache: HF's loop without one has no engine of its own
    out = estimate_many(frame, estimator=estimator)
    energy, time = float(out["energy_j"].sum()), float(out["time_s"].sum())
    hybrid = out["method"].iloc[0] == "hybrid"
    flags = sorted({f for joined in out["flags"] for f in str(joined).split(", ") if f})
    return GenerationEstimate(
        model=model, gpu=gpu, batch=batch, input_len=input_len, output_len=output_len, kv_cache=kv_cache,
        energy_j=energy, time_s=time, power_w=energy / time,
        energy_interval_j=(float(out["energy_lo_j"].sum()), float(out["energy_hi_j"].sum())) if hybrid else None,
        time_interval_s=(float(out["time_lo_s"].sum()), float(out["time_hi_s"].sum())) if hybrid else None,
        ttft_s=float(out["time_s"].iloc[0]),
        tpot_s=float(out["time_s"].iloc[1:].mean()) if output_len > 1 else float("nan"),
        energy_per_output_token_j=energy / (batch * output_len), energy_per_request_j=energy / batch,
        prefill_energy_j=float(out["energy_j"].iloc[0]), decode_energy_j=float(out["energy_j"].iloc[1:].sum()),
        memory_gb=float(out["memory_gb"].max()), flags=tuple(flags), method=str(out["method"].iloc[0]), steps=out)
