"""A small accumulator of kernel records used by the lowerings (one call per kernel *kind*, counts multiply)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from joulecast.features import arch

# PyTorch runs fp32 matmuls on CUDA cores unless TF32 is enabled (torch.backends.cuda.matmul.allow_tf32 is False by
# default since PyTorch 1.12), so an "fp32" workload's GEMMs use the CUDA-core path.
_TENSOR_CORE_DTYPES = {"tf32", "bf16", "fp16", "fp8", "int8"}
# Activations of fp8/int8 workloads stay in bf16 between GEMMs (only the GEMM inputs are quantised).
_ACTIVATION_DTYPE = {"fp8": "bf16", "int8": "bf16", "tf32": "fp32"}
# ... each by a kernel of its own before its GEMM, reading the bf16 activation and writing it in 8 bits with its scales
# (`KernelBuilder.quantize`): vLLM's fp8 linear layers run scaled_fp8_quant (per-token dynamic scales) or
# per_token_group_quant_fp8 (128-wide groups) before each scaled GEMM, its fused_moe the same before each grouped GEMM
# (vllm/model_executor/layers/quantization/utils; Transformer Engine casts a GEMM's input likewise). vLLM's own
# benchmark times it beside the GEMM alone (benchmarks/kernels/bench_fp8_gemm.py, per-token activations against
# "noquant"): +3.0 us on Llama-3.1-8B's 6,144 x 4,096 layer at 16 tokens, +3.9 at 256 (pull request #17126's example,
# its GPU unnamed); +4.1 on an H100 at 16 tokens of a 12,288 x 5,376 layer (#49363); +3.4 on a B200 at 16 tokens of the
# 6,144 x 4,096 one (#19566); physics gives such a kernel 3 us (`arch.KERNEL_MIN_S` and a launch gap) (M). Assumption:
# no compile pass fuses it into the norm or activation before it (vLLM's fusion passes are not modelled). Not in
# training: Transformer Engine casts a layer's input in the kernel before it (LayerNormLinear's norm, its fused
# activations), and the per-layer overhead fitted on MLPerf's FP8 NeMo runs stands for what it leaves
# (experiments/mlperf_training.py: with a kernel of its own a GEMM input, that fit falls from 2.79 to 1.42 ms a layer
# and GPT-3's planned step from +1.7 to -5.8 % of its trace).
_QUANTIZED_INPUTS = frozenset({"fp8", "int8"})


def expert_split(slots: Any, active: Any, shards: int = 1) -> tuple[Any, Any]:
    """(experts, tokens each) of `slots` routed tokens over `active` experts, shared out evenly and rounded up (numbers
    or arrays alike); with expert parallelism over `shards` GPUs, one GPU's: its `active` experts take the slots
    routed to it, a `shards`-th of them."""
    return active, -(-slots // (active * shards))


@dataclass
class KernelBuilder:
    """Collects kernel records for one workload; `count` multiplies everything added inside `repeat`."""

    dtype: str
    fusions: frozenset[str] = frozenset()  # `joulecast.data.fusions` the lowering applies
    records: list[dict[str, Any]] = field(default_factory=list)
    params: int = 0            # weight elements seen in linear / conv layers (for the optimizer step)
    # experts' GEMMs as one GEMM over every routed slot (batch 1), which `features.lower_many` fits as a polynomial
    # in the sizes and then splits over the active experts (`expert_split`)
    flat_experts: bool = False
    quantize_inputs: bool = True  # an 8-bit GEMM's input quantized by a kernel of its own (`quantize`; not in training)
    _multiplier: int = 1

    @property
    def act(self) -> str:
        """The activation (non-GEMM) dtype."""
        return _ACTIVATION_DTYPE.get(self.dtype, self.dtype)

    def repeat(self, times: int) -> "_Repeat":
        return _Repeat(self, times)

    def _add(self, count: int = 1, **record: Any) -> None:
        record["count"] = count * self._multiplier
        self.records.append(record)

    def _gemm_dtypes(self) -> dict[str, Any]:
        acc = "fp32" if self.dtype in ("fp32", "tf32") else self.act
        return dict(dtype=self.dtype, acc_dtype=acc, tensor_core=self.dtype in _TENSOR_CORE_DTYPES)

    def quantize(self, elements: int, count: int = 1) -> None:
        """An 8-bit GEMM's input quantized from the activation dtype (`_QUANTIZED_INPUTS`); nothing for other dtypes."""
        if self.quantize_inputs and self.dtype in _QUANTIZED_INPUTS:
            self.ew(f"quantize_{self.dtype}", elements, out=self.dtype, count=count)

    def linear(self, out_features: int, tokens: int, in_features: int, tokens_first: bool = False, count: int = 1) -> None:
        """y = x W^T. cuBLAS sees M = out, N = tokens for nn.Linear; GPT-2's Conv1D (addmm(x, W)) has M = tokens.
        An 8-bit layer's input is quantized first (`quantize`)."""
        self.quantize(tokens * in_features, count)
        m, n = (tokens, out_features) if tokens_first else (out_features, tokens)
        self.params += out_features * in_features * count * self._multiplier
        self._add(count, kind="gemm", op="linear", batch=1, m=m, n=n, k=in_features, **self._gemm_dtypes())

    def experts(self, out_features: int, slots: int, in_features: int, active: int, experts: int,
                shards: int = 1) -> None:
        """One grouped GEMM over a mixture-of-experts layer's `active` experts (of `experts` held), its `slots`
        routed tokens shared out evenly (`expert_split`), as one kernel (vLLM's fused_moe, Megatron's grouped GEMM):
        the weights of every expert count, those of the active ones are read. With expert parallelism over `shards`
        GPUs, `experts` and `active` are one GPU's, `slots` every GPU's."""
        self.params += out_features * in_features * experts * self._multiplier
        batch, each = (1, slots) if self.flat_experts else expert_split(slots, active, shards)
        self._add(1, kind="gemm", op="experts", batch=batch, m=out_features, n=each, k=in_features,
                  **self._gemm_dtypes())

    def bmm(self, batch: int, m: int, n: int, k: int, count: int = 1) -> None:
        self._add(count, kind="gemm", op="bmm", batch=batch, m=m, n=n, k=k, **self._gemm_dtypes())

    def fp32_gemm(self, m: int, n: int, k: int) -> None:
        """A small fp32 GEMM on CUDA cores, whatever the workload dtype (e.g. rotary tables)."""
        self._add(kind="gemm", op="linear", batch=1, m=m, n=n, k=k, dtype="fp32", acc_dtype="fp32", tensor_core=False)

    def attention(self, batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int, head_dim: int, causal: bool,
                  op: str = "flash") -> None:
        """One fused attention kernel: FlashAttention-style (`op` flash), or one given an explicit mask (masked)."""
        self._add(kind="attention", op=op, dtype=self.act, acc_dtype=self.act, tensor_core=self.act != "fp32",
                  batch=batch, heads=heads, kv_heads=kv_heads, seq_q=seq_q, seq_kv=seq_kv, head_dim=head_dim, causal=causal)

    def ew(self, op: str, elements: int, dtype: str | None = None, out: str | None = None, count: int = 1) -> None:
        dtype = dtype or self.act
        self._add(count, kind="elementwise", op=op, dtype=dtype, acc_dtype=out or dtype, rows=1, cols=elements)

    def norm(self, op: str, rows: int, cols: int) -> None:
        self._add(kind="norm", op=op, dtype=self.act, acc_dtype=self.act, rows=rows, cols=cols)

    def softmax(self, rows: int, cols: int, dtype: str | None = None) -> None:
        dtype = dtype or self.act
        self._add(kind="softmax", op="softmax", dtype=dtype, acc_dtype=dtype, rows=rows, cols=cols)

    def embedding(self, tokens: int, dim: int, vocab: int = 0) -> None:
        self.params += vocab * dim * self._multiplier
        self._add(kind="embedding", op="lookup", dtype=self.act, acc_dtype=self.act, rows=tokens, cols=dim)

    def conv2d(self, batch: int, c_in: int, c_out: int, hw_in: int, kernel: int, stride: int, padding: int,
               depthwise: bool = False) -> int:
        """An implicit-GEMM convolution (M = N*P*Q, N = C_out, K = C_in*R*S); returns the output height/width."""
        hw_out = (hw_in + 2 * padding - kernel) // stride + 1
        k = (1 if depthwise else c_in) * kernel * kernel
        self.params += c_out * k * self._multiplier
        dtypes = self._gemm_dtypes()
        if self.dtype == "fp32":  # cuDNN convolutions use TF32 tensor cores (torch.backends.cudnn.allow_tf32 is True
            dtypes.update(dtype="tf32", tensor_core=True)  # by default, unlike matmuls; PyTorch docs, "TF32 on Ampere")
        if depthwise:  # depthwise convolutions have no reduction across channels: CUDA cores, not tensor cores
            dtypes["tensor_core"] = False
        elif "channels_last" not in self.fusions:  # cuDNN's tensor-core kernels read NHWC: an NCHW input is
            self.ew(arch.LAYOUT_TRANSPOSE_OP, batch * c_in * hw_in * hw_in)  # transposed first (arch's comment)
        self._add(kind="conv2d", op="depthwise" if depthwise else "conv2d", batch=1, m=batch * hw_out * hw_out,
                  n=c_out, k=k, conv_in_elements=batch * c_in * hw_in * hw_in, **dtypes)
        return hw_out


class _Repeat:
    def __init__(self, builder: KernelBuilder, times: int):
        self.builder, self.times = builder, times

    def __enter__(self) -> KernelBuilder:
        self.builder._multiplier *= self.times
        return self.builder

    def __exit__(self, *exc: object) -> None:
        self.builder._multiplier //= self.times
