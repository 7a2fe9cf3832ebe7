"""A serving step as a workload: what `serve` prices and what a measured serving row's `serve:` reference rebuilds."""

import numpy as np
import pytest

import joulecast
from joulecast.data.gpus import gpu
from joulecast.data.workload_ref import serve_ref
from joulecast.features import physics
from joulecast.features.refs import resolve
from joulecast.features.lowering import resolve_model
from joulecast.features.serve_step import context_len, prompt_tokens, step_records, step_workload


def test_a_step_carries_the_prompts_that_replace_finished_requests():
    # 128 running requests of 480 output tokens: one finishes every 480 / 128 steps, so each step carries 128 x 128
    # / 480 = 34.1 prompt tokens of 128-token prompts, at most the chunk budget
    assert prompt_tokens(128, 128, 480) == 34
    assert prompt_tokens(4096, 4096, 64) == 8192 and prompt_tokens(4096, 4096, 64, chunk_tokens=512) == 512
    # a running request's context: its prompt and, length-biased, half of (1 + cv^2) times the mean output
    assert context_len(128, 480) == 368 and context_len(128, 480, output_len_cv=1.0) == 608


def test_a_serve_reference_rebuilds_the_step_serve_prices():
    ref = serve_ref("llama-3-8b", batch=128, input_len=128, output_len=480.5, dtype="bf16", engine="vllm-0.5.4", tp=1)
    assert ref == "serve:llama-3-8b?batch=128&input_len=128&output_len=480.5&dtype=bf16&engine=vllm-0.5.4&tp=1"
    rebuilt = resolve(ref)
    direct, prompt = step_workload("llama-3-8b", batch=128, input_len=128, output_len=480.5, engine="vllm-0.5.4")
    assert prompt == 34
    assert (rebuilt.phase, rebuilt.batch, rebuilt.seq, rebuilt.engine, rebuilt.launch_mode) == (
        "decode", 128, 368, "vllm-0.5.4", "graph")
    for name, column in direct.columns.items():
        assert np.array_equal(np.asarray(rebuilt.columns[name]), np.asarray(column)), name
    # the prompts are GPU work of the step: its linear layers run over the decodes' and the prompts' tokens
    alone, none = step_workload("llama-3-8b", batch=128, input_len=128, output_len=480.5, chunk_tokens=1)
    spec = gpu("h100-sxm")
    with_prompts = physics.analyze_arrays(direct.columns, spec)[1].gpu_busy_s[0]
    assert none == 1 and physics.analyze_arrays(alone.columns, spec)[1].gpu_busy_s[0] < with_prompts


def test_a_steps_prompt_tokens_run_through_the_decodes_kernels_not_beside_them():
    # an engine flattens the step's tokens: norms, activations and linear layers run once over the 8 decodes and the
    # 4 prompt tokens; only attention is the prompts' own (one kernel a layer), and the LM head the decodes' alone
    config = resolve_model("llama-3-8b")[0]
    decode, _ = step_records(config, batch=8, context=378, prompt=0, input_len=192, dtype="bf16", engine="vllm-0.11.1")
    mixed, _ = step_records(config, batch=8, context=378, prompt=4, input_len=192, dtype="bf16", engine="vllm-0.11.1")
    hidden, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    launches = [sum(r["count"] for r in records) for records in (decode, mixed)]
    assert launches[1] == launches[0] + layers
    prompt_attention = mixed[len(decode):]
    assert all(r["kind"] == "attention" and r["seq_q"] == 4 for r in prompt_attention)
    widths = {r["cols"] for r in mixed if r["kind"] == "elementwise" and r["op"] == "pointwise_add"}
    assert 12 * hidden in widths and 8 * hidden not in widths     # the residual adds over all 12 tokens
    heads = [r for r in mixed if r["kind"] == "gemm" and vocab in (r["m"], r["n"])]
    assert len(heads) == 1 and 8 in (heads[0]["m"], heads[0]["n"])


def test_a_tensor_parallel_reference_is_one_gpus_shard():
    whole = resolve(serve_ref("llama-3-70b", batch=64, input_len=128, output_len=456))
    shard = resolve(serve_ref("llama-3-70b", batch=64, input_len=128, output_len=456, tp=8))
    flops = [physics.analyze_arrays(w.columns, gpu("a100-sxm4-40gb"))[0]["flops"] for w in (whole, shard)]
    counts = [np.asarray(w.columns["count"], float) for w in (whole, shard)]
    assert float(flops[1] @ counts[1]) == pytest.approx(float(flops[0] @ counts[0]) / 8, rel=0.02)


def test_a_sampling_engines_step_carries_its_sampler_over_every_decodes_logits():
    """vLLM's PyTorch-native sampler is GPU work of the step for requests that sample: passes over B rows of the
    whole vocabulary (every GPU of a tensor-parallel engine samples from all of it), more with penalties; greedy
    requests, and an engine whose sampler is fused (SGLang's FlashInfer kernels), add nothing."""
    from joulecast.features import sampling

    vocab = int(resolve_model("llama-3-8b")[0]["vocab_size"])
    kw = dict(batch=64, input_len=256, output_len=256)

    def kernels(**more) -> int:  # launches: identical records are one row with their count
        work, _ = step_workload("llama-3-8b", **kw, **more)
        return int(np.sum(work.columns["count"]))

    greedy = kernels(engine="vllm-0.11.1")
    assert greedy == kernels(engine="vllm-0.11.1", sampling="greedy")
    assert kernels(engine="sglang-0.4", sampling="top-p") == kernels(engine="sglang-0.4")
    added = sampling.sampler_records(64, vocab, "top-p", "sort")
    assert kernels(engine="vllm-0.11.1", sampling="top-p") == greedy + len(added)
    assert kernels(engine="vllm-0.11.1", sampling="top-p-penalties") > greedy + len(added)
    assert all(r["cols"] % vocab in (0, vocab // 2) and r["cols"] >= 64 * vocab for r in added)
    assert sum(r["op"] == "radix_pass" for r in added) == sampling.RADIX_PASSES
    shard, _ = step_workload("llama-3-70b", **kw, engine="vllm-0.11.1", sampling="top-p", tp=4)
    vocab70 = int(resolve_model("llama-3-70b")[0]["vocab_size"])
    assert max(shard.columns["cols"]) == 2 * 64 * vocab70  # the sort's int64 indices over the whole vocabulary
    assert sampling.sampler_records(64, vocab, "top-p", None) == []
    with pytest.raises(joulecast.InputError, match="sampling: unknown 'nucleus'; allowed: greedy, top-p"):
        step_workload("llama-3-8b", **kw, engine="vllm-0.11.1", sampling="nucleus")
