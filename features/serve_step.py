"""One continuous-batching serving step as a workload: B running requests decoding a token each, and the prefill
chunks of the prompts arriving meanwhile (the stated approximations: `joulecast.estimator.serving`'s docstring).

`joulecast.serve` prices its steps with it, and a measured serving run names its step by a `serve:` reference
(`joulecast.data.workload_ref.serve_ref`), so that the rows the residual learns from and the steps it corrects are
the same work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulecast.data import engines
from joulecast.data.workload import Workload
from joulecast.features import sampling as sampling_passes
from joulecast.features import train_step
from joulecast.features.kernel_table import kernel_columns
from joulecast.features.lowering import engine_records, lower, resolve_model

# vLLM 0.11.1 ran ML.ENERGY v3 with chunked prefill at most 8,192 tokens a step (`max-num-batched-tokens` in its
# benchmark_configs.csv).
CHUNK_TOKENS = 8192


def prompt_tokens(batch: int, input_len: float, output_len: float, chunk_tokens: int = CHUNK_TOKENS) -> int:
    """Prompt tokens a steady-state step carries: a request finishes and is replaced every output_len / B steps,
    so p = B x input / output, at most `chunk_tokens`."""
    return int(min(chunk_tokens, round(batch * input_len / output_len)))


def step_size(batch: int, input_len: float, output_len: float, output_len_cv: float = 0.0,
              chunk_tokens: int = CHUNK_TOKENS) -> tuple[int, int]:
    """A step's tokens (B decodes and its prompt chunk) and the context each is lowered over (`step_records`): their
    product is the step's batch x seq, which a pass holds to `data.workload.MAX_TOKENS`."""
    return batch + prompt_tokens(batch, input_len, output_len, chunk_tokens), context_len(input_len, output_len,
                                                                                         output_len_cv)


def context_len(input_len: float, output_len: float, output_len_cv: float = 0.0) -> int:
    """A running request's mean context: input + output (1 + cv^2) / 2 (length-biased: a long answer runs for more
    steps than a short one)."""
    return max(1, int(round(input_len + output_len * (1.0 + output_len_cv ** 2) / 2)))


# Measured and not shipped: a step's kernels as vLLM's Llama code runs them (data/fusions.py's activation,
# attention_layout, norm, packed_projections, residual_norm and rope: vllm/model_executor/models/llama.py, SGLang's
# the same) rather than Hugging Face's eager ones. ML.ENERGY v3's Llama-3.1-8B on one H100 at batch 8 comes right in
# its parts (step 8.30 -> 6.55 ms against a measured mean of 7.46 and a median inter-token latency near 6.9; power
# 450 -> 510 W against 486), but v3's J/token at 192-token prompts goes 16.1 -> 23.6 % (H100) and 22.2 -> 28.9 %
# (B200), every group read lower (the H100's one-GPU rows -24.6 -> -32.4 %), and vLLM 0.5.4's host work, re-measured
# over the fused steps, splits by GPU (A100-SXM4 / H100 0.406 / 0.399 -> 0.429 / 0.405 ms a running sequence): the
# eager kernels' extra time stands in for GPU work of a step that nothing here models yet (at batch 511 the H100's
# measured step is 52.1 ms against physics' 35.8, its power at the 700 W cap). Re-measured on 2026-12-05's fifth
# session's physics: v3's J/token 17.7 -> 21.0 % (H100), 20.5 -> 27.9 % (B200), the fused steps short at every batch
# (experiments/HISTORY.md).
def step_records(config: Mapping[str, Any], batch: int, context: int, prompt: int, input_len: int, dtype: str,
                 engine: str | None) -> tuple[list[dict], int]:
    """One mixed step's kernel records and the weights: every kernel but attention runs once over all B + p tokens
    of the step (the engines flatten a step's tokens into one batch: vLLM's `input_ids` of `num_scheduled_tokens`),
    the linear layers' weights read once; the decode attention over the B contexts, the prompts' attention over
    their chunks; the LM head on the decodes' last tokens."""
    tokens = batch + max(prompt, 0)
    # one lowering over every token of the step (one token a sequence); its attention and LM head then narrowed to the
    # B decodes
    records, params = lower(config, phase="decode", batch=tokens, seq=context, dtype=dtype, lm_head=True)
    vocab = int(config["vocab_size"])
    step = engine_records([_decodes_only(r, tokens, batch, vocab) for r in records], engine)
    if prompt <= 0:
        return step, params
    chunk_batch = max(1, round(prompt / input_len))
    prefill, _ = lower(config, phase="prefill", batch=chunk_batch, seq=max(1, prompt // chunk_batch),
                       dtype=dtype, lm_head=False)
    return step + [r for r in prefill if r["kind"] == "attention"], params


def _decodes_only(record: dict[str, Any], tokens: int, batch: int, vocab: int) -> dict[str, Any]:
    """A record of the step's lowering over all its tokens as the decodes' own where only they run it: the decode
    attention (over the B contexts) and the LM head (on the decodes' last tokens)."""
    if tokens == batch:
        return record
    if record["kind"] == "attention":
        return dict(record, batch=batch)
    if _is_lm_head(record, vocab):
        return dict(record, n=batch) if record["n"] == tokens else dict(record, m=batch)
    return record


def _is_lm_head(record: Mapping[str, Any], vocab: int) -> bool:
    """The vocabulary projection: a linear layer one of whose widths is the vocabulary."""
    return record["kind"] == "gemm" and record["op"] == "linear" and vocab in (record["m"], record["n"])


def step_workload(model: str | Mapping[str, Any], *, batch: int, input_len: float, output_len: float,
                  output_len_cv: float = 0.0, input_len_cv: float = 0.0, dtype: str = "bf16",
                  engine: str | None = None, launch_mode: str = "graph", tp: int = 1, chunk_tokens: int = CHUNK_TOKENS,
                  host_dispatch_s: float | None = None, sampling: str = "greedy",
                  expert_parallel: bool = False, prompt: int | None = None, own_prompt: int = 0
                  ) -> tuple[Workload, int]:
    """One GPU's shard of a serving step (tensor parallelism `tp`; a mixture of experts' experts split whole over
    the GPUs with `expert_parallel`), and the prompt tokens it carries: the steady state's mean (`prompt_tokens`), and
    `own_prompt` more (one request's prompt, or its last chunk: the step its first token comes in), or `prompt` where
    given (a step that admitted more or fewer prompts than the mean: `estimator.token_gaps`), at most the chunk; with
    the engine's sampler over the decodes' logits where the requests sample (`sampling`, `features.sampling`): every
    GPU of a tensor-parallel engine samples from the whole vocabulary (vLLM's V1 gathers the logits to all of them)."""
    sampling = sampling_passes.check_sampling(sampling)
    config, name, _ = resolve_model(model)
    shard = train_step.shard_config(config, tp=tp, expert_parallel=expert_parallel)
    prompt = min(chunk_tokens, prompt_tokens(batch, input_len, output_len, chunk_tokens) + own_prompt
                 if prompt is None else prompt)
    context = context_len(input_len, output_len, output_len_cv)
    # a prompt's attention over its chunk grows with its length squared: prompts spread about their mean (cv) cost as
    # prompts of length mean x (1 + cv^2) would, as many tokens in all (E[L^2] / E[L])
    prompt_len = max(1, int(round(input_len * (1.0 + input_len_cv ** 2))))
    records, params = step_records(shard, batch, context, prompt, prompt_len, dtype, engine)
    sampler = engines.engine(engine).sampler if engine else None
    records += sampling_passes.sampler_records(batch, int(config["vocab_size"]), sampling, sampler)
    work = Workload.from_table(kernel_columns(records), name=f"{name}/serve-step/b{batch}", model=name,
                               phase="decode", batch=batch, seq=context, dtype=dtype, source="config",
                               launch_mode=launch_mode, engine=engine, params=params, host_dispatch_s=host_dispatch_s)
    return work, prompt
