"""Workload references: a short string that rebuilds a measured row's workload.

``catalog:gpt2?phase=prefill&batch=8&seq=512&dtype=bf16&attention=eager``, ``kernels:/path/to/list.json``, or one
kernel ``kernel:gemm?m=4096&n=4096&k=4096&dtype=bf16`` (see `joulecast.features.kernel_specs`).
`joulecast.features.refs.resolve` builds the workload a reference names.
"""

from __future__ import annotations

from urllib.parse import urlencode


def catalog_ref(model: str, **params: object) -> str:
    return f"catalog:{model}?{urlencode({k: v for k, v in params.items() if v is not None})}"


def kernels_ref(path: str) -> str:
    return f"kernels:{path}"


def kernel_ref(op: str, **params: object) -> str:
    return f"kernel:{op}?{urlencode({k: v for k, v in params.items() if v is not None})}"
