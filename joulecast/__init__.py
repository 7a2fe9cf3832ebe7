"""joulecast: GPU energy, time and power of AI workloads in milliseconds.

    >>> import joulecast
    >>> w = joulecast.workload("llama-3-8b", phase="prefill", batch=8, seq=1024, dtype="bf16")
    >>> est = joulecast.estimate(w, "h100-sxm")
    >>> est.energy_j, est.time_s, est.power_w
"""

from joulecast.data.gpus import GpuSpec, catalog as gpu_catalog, gpu
from joulecast.data.kernel_list import workload_from_kernels
from joulecast.data.workload import Workload
from joulecast.errors import DataError, InputError, JoulecastError
from joulecast.estimator.api import Estimate, estimate, estimate_many
from joulecast.features.lowering import workload

__version__ = "0.1.0"
__all__ = ["Estimate", "GpuSpec", "Workload", "DataError", "InputError", "JoulecastError", "estimate", "estimate_many", "gpu",
           "gpu_catalog", "workload", "workload_from_kernels"]
