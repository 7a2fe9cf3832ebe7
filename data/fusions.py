"""Kernel fusions a training stack applies over Hugging Face's eager kernels: their names, checked where a job names
them. Each rule is applied by the lowering (`joulecast.features.lower_transformers`; a convolution's layout,
`joulecast.features.builder`); here only what a name means and the flags that turn it on in NVIDIA's and NeMo's
stacks.

- activation: the MLP's activation as one fused kernel: GPT-2's tanh GELU, eight kernels in Hugging Face's code, as
  one (Megatron's `bias_activation_fusion`, Transformer Engine's GELU); in a gated MLP, silu and the gate's multiply
  as one kernel reading both (Megatron's fused SwiGLU). An activation that is one kernel already stays so.
- gemm_activation: the MLP's activation costs no kernel of its own: it runs in the first GEMM's epilogue (cuBLASLt's
  GELU epilogue, apex's `--fused_gemm_gelu` in NVIDIA's MLPerf BERT). A gated MLP's cannot (the epilogue sees one of
  its two projections): there it changes nothing. The epilogue also writes the pre-activation in the forward
  pass and the input-gradient GEMM's epilogue reads it back (2 bytes an element each way, bf16): not counted, as
  that traffic rides GEMMs bound by their math or by L2 (BERT-large, 48 x 512 tokens: 9.7 GB a step, 3 ms at an
  H100's full DRAM bandwidth, against a 96 ms step).
- attention_layout: the fused attention reads and writes the token-major layout (apex FMHA `--fused_bias_mha`,
  Transformer Engine's fused attention, `NVTE_FUSED_ATTN=1`): no copy merging the heads after it.
- norm: RMSNorm as one kernel (Transformer Engine, apex) instead of Hugging Face's five.
- rope: the rotary embedding as one kernel a tensor (`apply_rope_fusion`) instead of two multiplies and an add.
- packed_projections: a Llama-family layer's query, key and value projections as one GEMM over their concatenated
  weights, and its gated MLP's gate and up projections as one (vLLM's QKVParallelLinear and
  MergedColumnParallelLinear; Megatron's fused QKV weight): the same weights read, fewer and wider GEMMs.
- residual_norm: the residual add inside the norm that follows it, one kernel reading the layer's output and the
  residual stream and writing the normalised input and the new residual (vLLM's `fused_add_rms_norm`, the RMSNorm
  layer called with its residual); with the norm fusion, on RMSNorm models.
- channels_last: a convolutional model's activations and weights in NHWC (PyTorch's `torch.channels_last`, the
  PyTorch performance tuning guide's advice for vision models), which cuDNN's tensor-core kernels read as they are:
  no layout transpose before each convolution (`features.arch.LAYOUT_TRANSPOSE_OP`), nor its backward's. Physics
  then runs ResNet-50's training step 1.26-1.29x faster on a V100 (fp16) and on A100s (bf16) at 128-256 images a
  GPU; MosaicML's Composer method card for it reports about 30 % on ResNet-50 ImageNet training on V100 and A100
  (docs.mosaicml.com, composer v0.3.0, method_cards/channels_last).
"""

from __future__ import annotations

from joulecast.data.errors import InputError, require_choice

FUSIONS = ("activation", "attention_layout", "channels_last", "gemm_activation", "norm", "packed_projections",
           "residual_norm", "rope")
# A fusion that applies only beside another: the residual add goes into the fused norm kernel.
NEEDS = {"residual_norm": "norm"}


def check_fusions(fusions: object, where: str = "fusions") -> tuple[str, ...]:
    """Fusion names (a list, or one comma-separated string), checked against FUSIONS: sorted, without repeats;
    "none" (any case), as the help names the default, or empty: no fusion."""
    if isinstance(fusions, str):
        fusions = [] if fusions.strip().lower() == "none" else [f.strip() for f in fusions.split(",") if f.strip()]
    if fusions is None:
        return ()
    if not isinstance(fusions, (list, tuple, set, frozenset)):
        raise InputError(where, f"a list of fusion names ({', '.join(FUSIONS)}), got {fusions!r}")
    for name in fusions:
        require_choice(name, FUSIONS, where, what="fusion")
    return tuple(sorted(set(fusions)))


# A framework's own time a layer and forward pass (`forward_overhead_s`): at most a second, far above any framework's
# (NeMo's eager FP8 stack: 3 ms, experiments/mlperf_training.py).
MAX_FORWARD_OVERHEAD_S = 1.0


def check_overhead(value: object, where: str = "forward_overhead_s") -> float:
    """A forward overhead in seconds: a number from 0 to MAX_FORWARD_OVERHEAD_S."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not 0.0 <= float(value) <= MAX_FORWARD_OVERHEAD_S:
        raise InputError(where, f"must be seconds from 0 to {MAX_FORWARD_OVERHEAD_S:g} a layer and forward pass, "
                                f"got {value!r}")
    return float(value)
