"""The hybrid estimator as an MLflow pyfunc model: a DataFrame of configurations in, estimates out."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc
import pandas as pd

if TYPE_CHECKING:
    from mlflow.types.schema import Schema


def example_input() -> pd.DataFrame:
    return pd.DataFrame({"model": ["gpt2", "llama-3-8b"], "gpu": ["a100-pcie-40gb", "h100-sxm"],
                         "phase": ["prefill", "decode"], "batch": [8, 16], "seq": [512, 2048], "dtype": ["bf16", "bf16"]})


# MLflow passes a served model only the columns its signature names, so the signature names every column
# `estimate_many` reads (`model` and `gpu` required, the rest optional), not only the example's.
_NUMBERS = {"batch": "long", "seq": "long", "sm_clock_mhz": "double", "power_limit_w": "double",
            "host_dispatch_s": "double", "tp": "long"}


def input_schema() -> "Schema":
    from mlflow.types.schema import ColSpec, Schema

    from joulecast.estimator.many import CONFIG_COLUMNS

    return Schema([ColSpec(_NUMBERS.get(c, "string"), c, required=c in ("model", "gpu")) for c in CONFIG_COLUMNS])


class HybridPyfunc(mlflow.pyfunc.PythonModel):
    """Physics x exp(residual); the residual models travel as the `estimator` artifact folder."""

    def load_context(self, context: Any) -> None:
        self.load_context_from(context.artifacts["estimator"])

    def load_context_from(self, folder: str | Path) -> None:
        from joulecast.estimator.residual import Residual

        self._model = Residual.load(folder)

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        from joulecast.estimator.many import estimate_many

        result = estimate_many(model_input, estimator=self._model)
        return result[["energy_j", "time_s", "power_w", "energy_lo_j", "energy_hi_j", "time_lo_s", "time_hi_s",
                       "physics_energy_j", "physics_time_s", "in_domain", "flags", "outside_domain", "memory_gb"]]
