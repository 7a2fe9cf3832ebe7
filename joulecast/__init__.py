"""joulecast: GPU energy, time and power of AI workloads in milliseconds.

    >>> import joulecast
    >>> w = joulecast.workload("llama-3-8b", phase="prefill", batch=8, seq=1024, dtype="bf16")
    >>> est = joulecast.estimate(w, "h100-sxm")
    >>> est.energy_j, est.time_s, est.power_w
    >>> joulecast.carbon(est, "DE", pue=1.1)["carbon_g"]   # gCO2e of its energy on Germany's grid

The names below load on first use (PEP 562): importing `joulecast.data`, which every room does, does not import the
estimator through this package.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

# Run from a source checkout's root, `import joulecast` finds this folder (the facade) before the installed package;
# the rooms are its siblings there (data/, features/, ...), so the checkout's root joins the package's path and
# `joulecast.data` resolves to ./data, as the install maps it.
_ROOT = Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "data" / "__init__.py").is_file() and str(_ROOT) not in __path__:
    __path__.append(str(_ROOT))
_EXPORTS = {
    "GpuSpec": "joulecast.data.gpus", "gpu": "joulecast.data.gpus", "Workload": "joulecast.data.workload",
    "DataError": "joulecast.data.errors", "InputError": "joulecast.data.errors",
    "JoulecastError": "joulecast.data.errors", "workload": "joulecast.features.lowering",
    "workload_from_kernels": "joulecast.features.kernel_list", "Estimate": "joulecast.estimator.api",
    "estimate": "joulecast.estimator.api", "estimate_batch": "joulecast.estimator.api",
    "estimate_many": "joulecast.estimator.many",
    "generate": "joulecast.estimator.jobs", "GenerationEstimate": "joulecast.estimator.jobs",
    "generate_requests": "joulecast.estimator.jobs", "RequestsEstimate": "joulecast.estimator.jobs",
    "train_run": "joulecast.estimator.train_run", "TrainRunEstimate": "joulecast.estimator.train_run",
    "plan": "joulecast.estimator.plan", "load_job": "joulecast.data.job_file",
    "serve": "joulecast.estimator.serving", "ServeEstimate": "joulecast.estimator.serving",
    "carbon": "joulecast.data.carbon", "read_requests": "joulecast.data.requests",
}
_RENAMED = {"gpu_catalog": ("joulecast.data.gpus", "catalog"), "sweep": ("joulecast.estimator.sweep", "run_sweep"),
            "SweepResult": ("joulecast.estimator.sweep", "SweepResult"),
            "plan_sweep": ("joulecast.estimator.plan", "sweep")}
__all__ = sorted([*_EXPORTS, *_RENAMED])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, attribute = _EXPORTS[name], name
    elif name in _RENAMED:
        module, attribute = _RENAMED[name]
    else:
        raise AttributeError(f"module 'joulecast' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The API and the version (not this module's own imports, `importlib`, `Path`, `Any`: tab completion shows what
    a user calls)."""
    return sorted([*__all__, "__version__"])
