"""Workload references (`joulecast.data.workload_ref`) resolved: the workload a measured row names, rebuilt."""

from __future__ import annotations

from urllib.parse import parse_qsl

from joulecast.data.errors import InputError
from joulecast.data.workload import Workload
from joulecast.features.kernel_list import workload_from_kernels
from joulecast.features.kernel_specs import kernel_workload
from joulecast.features.lowering import workload
from joulecast.features.serve_step import step_workload

# A serving step reference's numbers (the rest are names): integers, and lengths that may be means
_SERVE_INTS, _SERVE_FLOATS = ("batch", "tp", "chunk_tokens"), ("input_len", "output_len", "output_len_cv")


def resolve(ref: str) -> Workload:
    """Build the workload a reference names."""
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
        op, _, query = rest.partition("?")
        sizes: dict[str, object] = {k: (v == "True" if k == "causal" else v if k == "dtype" else int(v))
                                    for k, v in parse_qsl(query)}
        return kernel_workload(op, **sizes)  # type: ignore[arg-type]
    if scheme == "serve":
        model, _, query = rest.partition("?")
        step = {k: int(v) if k in _SERVE_INTS else float(v) if k in _SERVE_FLOATS else v
                for k, v in parse_qsl(query)}
        return step_workload(model, **step)[0]  # type: ignore[arg-type]
    raise InputError("workload_ref", f"unknown scheme in {ref!r}; allowed: catalog:, kernels:, kernel:, serve:")
