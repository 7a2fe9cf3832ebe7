"""Workload references: a short string that rebuilds a measured row's workload.

``catalog:gpt2?phase=prefill&batch=8&seq=512&dtype=bf16&attention=eager``, ``kernels:/path/to/list.json``, or one
kernel ``kernel:gemm?m=4096&n=4096&k=4096&dtype=bf16`` (see `joulecast.features.kernel_specs`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from joulecast.data.workload import Workload
from joulecast.errors import InputError


def catalog_ref(model: str, **params: object) -> str:
    return f"catalog:{model}?{urlencode({k: v for k, v in params.items() if v is not None})}"


def kernels_ref(path: str) -> str:
    return f"kernels:{path}"


def kernel_ref(op: str, **params: object) -> str:
    return f"kernel:{op}?{urlencode({k: v for k, v in params.items() if v is not None})}"


def resolve(ref: str) -> Workload:
    """Build the workload a reference names."""
    from joulecast.data.kernel_list import workload_from_kernels
    from joulecast.features.lowering import workload

    scheme, _, rest = ref.partition(":")
    if scheme == "kernels":
        return workload_from_kernels(rest)
    if scheme == "catalog":
        model, _, query = rest.partition("?")
        params: dict[str, object] = dict(parse_qsl(query))
        for key in ("batch", "seq"):
            if key in params:
                params[key] = int(params[key])  # type: ignore[arg-type]
        return workload(model, **params)  # type: ignore[arg-type]
    if scheme == "kernel":
        from joulecast.features.kernel_specs import kernel_workload

        op, _, query = rest.partition("?")
        sizes: dict[str, object] = {k: (v == "True" if k == "causal" else v if k == "dtype" else int(v))
                                    for k, v in parse_qsl(query)}
        return kernel_workload(op, **sizes)  # type: ignore[arg-type]
    raise InputError("workload_ref", f"unknown scheme in {ref!r}; allowed: catalog:, kernels:, kernel:")
