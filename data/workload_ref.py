"""Workload references: a short string that rebuilds a measured row's workload.

``catalog:gpt2?phase=prefill&batch=8&seq=512&dtype=bf16&attention=eager``, ``kernels:/path/to/list.json``, one
kernel ``kernel:gemm?m=4096&n=4096&k=4096&dtype=bf16`` (see `joulecast.features.kernel_specs`), or one serving step
``serve:llama-3-8b?batch=128&input_len=128&output_len=480&engine=vllm-0.5.4`` (`joulecast.features.serve_step`).
`joulecast.features.refs.resolve` builds the workload a reference names.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode

# Fusions the PyTorch runner (`joulecast.data.collect.torch_models`) applies over Hugging Face's eager kernels, by
# lowering family: it runs GPT-2's tanh GELU as one kernel (`F.gelu(x, approximate="tanh")`), which Hugging Face's
# `gelu_new` runs as eight (`joulecast.data.fusions`: the `activation` fusion). Every other family's activation, norm
# and rotary embedding are run as lowered. A catalog reference the collector writes names them (`as_run`), so that a
# measured pass and its physics describe the same kernels: before it, the H200's GPT-2 prefill at batch 32 and 512
# tokens read 12.4 ms of physics against 7.6 measured; with it, 7.4.
RUNNER_FUSIONS: Mapping[str, str] = {"gpt2": "activation"}
# Families the runner can also run as Hugging Face's eager code runs them, kernel by kernel as the lowering's `eager`
# attention path and no fusions describe (the EnergAIzer tracer's method): a plan item's `attention: eager`.
RUNNER_EAGER_FAMILIES = frozenset({"gpt2", "bert", "opt", "llama"})


def catalog_ref(model: str, **params: object) -> str:
    return f"catalog:{model}?{urlencode({k: v for k, v in params.items() if v is not None})}"


def kernels_ref(path: str) -> str:
    return f"kernels:{path}"


def kernel_ref(op: str, **params: object) -> str:
    return f"kernel:{op}?{urlencode({k: v for k, v in params.items() if v is not None})}"


def serve_ref(model: str, **params: object) -> str:
    return f"serve:{model}?{urlencode({k: v for k, v in params.items() if v is not None})}"


def as_run(ref: str) -> str:
    """A catalog reference with the fusions the PyTorch runner applies to its model (`RUNNER_FUSIONS`), where it
    names none and its attention is not `eager` (run as Hugging Face's eager code, none); any other reference as it
    is."""
    from joulecast.data.models import family, model_entry

    scheme, _, rest = ref.partition(":")
    model, _, query = rest.partition("?")
    params = dict(parse_qsl(query))
    if scheme != "catalog" or "fusions" in params or params.get("attention") == "eager":
        return ref
    fusions = RUNNER_FUSIONS.get(family(model_entry(model)["config"]))
    return f"{ref}&fusions={fusions}" if fusions else ref
