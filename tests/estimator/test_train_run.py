"""A training run is its steps, each its accumulated micro-batches and one optimizer update; LoRA, recomputation,
FP8 and tensor-parallel shards change the work as their rules say."""

import json

import numpy as np
import pytest

import joulecast
from joulecast.cli import main
from joulecast.data.fusions import FUSIONS
from joulecast.estimator.train_run import Layout, step_estimate
from joulecast.features import train_step
from joulecast.features.lowering import lower, resolve_model


def _run(**kw):
    base = dict(seq=512, global_batch=16, micro_batch=4, steps=10, estimator="physics")
    return joulecast.train_run("gpt2", "a100-sxm4-80gb", **{**base, **kw})


def test_a_run_is_its_steps_each_accumulated_micro_batches_and_one_update():
    run = _run()
    step = run.step
    assert run.accumulation == 4 and run.tokens == 10 * 16 * 512
    assert step.time_s == pytest.approx(4 * step.micro.time_s + step.optimizer.time_s, rel=1e-12)
    assert run.energy_j == pytest.approx(10 * (4 * step.micro.energy_j + step.optimizer.energy_j), rel=1e-12)
    assert run.energy_per_token_j == pytest.approx(run.energy_j / run.tokens)
    assert run.power_w == pytest.approx(run.energy_j / run.time_s)
    # steps scale the run, tokens round up to whole steps
    assert _run(steps=20).energy_j == pytest.approx(2 * run.energy_j, rel=1e-12)
    assert _run(steps=None, tokens=10 * 16 * 512 - 1).steps == 10


def test_the_hybrid_interval_of_a_run_adds_its_steps_bounds():
    run = joulecast.train_run("llama-3-8b", "h100-sxm", seq=1024, global_batch=8, micro_batch=2, steps=5)
    lo, hi = run.energy_interval_j
    assert run.method == "hybrid" and lo < run.energy_j < hi
    micro, opt = run.step.micro, run.step.optimizer
    assert lo == pytest.approx(5 * (4 * micro.energy_interval_j[0] + opt.energy_interval_j[0]), rel=1e-12)


def test_fp32_on_a_gpu_without_tf32_runs_its_head_on_cuda_cores_too():
    run = joulecast.train_run("bert-base", "v100-sxm2", seq=384, global_batch=8, steps=3, dtype="fp32",
                              power_limit_w=150, estimator="physics")
    columns = run.step.micro.kernel_columns
    gemms = columns["kind"] == "gemm"
    assert gemms.any() and not np.asarray(columns["tensor_core"])[gemms].any()
    assert run.energy_j > 0 and run.power_w <= 150 + 1e-9


def test_lora_freezes_the_weights_and_trains_small_adapters():
    full, lora = _run(), _run(lora_rank=8)
    assert lora.memory_parts_gb["optimizer"] < full.memory_parts_gb["optimizer"] / 50
    # on a 8B model the frozen weights' gradients outweigh the adapters' small GEMMs (on GPT-2 their launches do not)
    big = dict(seq=1024, global_batch=8, micro_batch=4, steps=1, estimator="physics")
    full8, lora8 = (joulecast.train_run("llama-3-8b", "h100-sxm", lora_rank=r, **big) for r in (0, 8))
    assert lora8.time_s < 0.85 * full8.time_s and lora8.energy_j < 0.85 * full8.energy_j
    config = resolve_model("gpt2")[0]
    forward, params = lower(config, phase="prefill", batch=4, seq=512, dtype="bf16", lm_head=False)
    # every GPT-2 linear: qkv (768 -> 2304), proj (768 -> 768), fc (768 -> 3072), fc2 (3072 -> 768), 12 layers
    expected = 12 * 8 * ((768 + 2304) + (768 + 768) + (768 + 3072) + (3072 + 768))
    assert train_step.lora_params(forward, 4 * 512, 8, frozenset({50257})) == expected
    assert lora.step.trainable == expected
    attention_only = train_step.skip_widths(config, "attention")
    assert train_step.lora_params(forward, 4 * 512, 8, attention_only) == 12 * 8 * ((768 + 2304) + (768 + 768))


def test_a_mixture_of_experts_trains_its_experts_whole_and_freezes_them_under_lora():
    """Each active expert's grouped GEMM gets its input's gradient (its own weights transposed, over its tokens)
    and, in a full fine-tune, its weights' (every expert's, in the optimizer too); LoRA adapts the dense GEMMs and
    leaves the experts frozen: no weight gradient for them."""
    forward, params = lower(resolve_model("mixtral-8x7b")[0], phase="prefill", batch=2, seq=256, dtype="bf16",
                            lm_head=False)
    up = next(r for r in forward if r["op"] == "experts" and r["m"] == 2 * 14336)
    assert (up["batch"], up["n"], up["k"]) == (8, 128, 4096)  # 512 tokens, 2 each, over all 8 experts
    full = train_step.micro_step(forward, 512)
    lora = train_step.micro_step(forward, 512, lora_rank=16, skip_widths=frozenset({32000}))
    grads = lambda steps, op: [(r["batch"], r["m"], r["n"], r["k"]) for r in steps  # noqa: E731
                               if r["op"] == op and r["m"] in (2 * 14336, 4096) and r["k"] in (2 * 14336, 4096, 128)]
    assert (8, 4096, 128, 2 * 14336) in grads(full, "experts_dgrad") and (8, 2 * 14336, 4096, 128) in grads(
        full, "experts_wgrad")
    assert grads(lora, "experts_dgrad") == grads(full, "experts_dgrad") and not grads(lora, "experts_wgrad")
    assert train_step.lora_params(forward, 512, 16, frozenset({32000})) < 0.01 * params  # the experts not adapted
    run = dict(seq=256, global_batch=2, micro_batch=2, steps=1, estimator="physics")
    whole, adapted = (joulecast.train_run("mixtral-8x7b", "h200", lora_rank=r, **run) for r in (0, 16))
    assert adapted.time_s < whole.time_s and whole.step.trainable == params


def test_recomputation_trades_time_for_memory_and_fp8_runs_faster_where_it_exists():
    none, full = _run(), _run(recompute="full")
    selective = _run(recompute="selective")
    assert none.time_s < selective.time_s < full.time_s
    # the layers' activations shrink tenfold; the loss's log-probabilities stay (4 bytes a token and vocabulary entry)
    loss = 4 * 50257 * 4 * 512 / 2**30
    assert full.memory_parts_gb["activations"] - loss < (none.memory_parts_gb["activations"] - loss) / 10
    bf16 = joulecast.train_run("llama-3-8b", "h100-sxm", seq=2048, global_batch=4, steps=1, estimator="physics")
    fp8 = joulecast.train_run("llama-3-8b", "h100-sxm", seq=2048, global_batch=4, steps=1, dtype="fp8",
                              estimator="physics")
    assert fp8.time_s < bf16.time_s
    with pytest.raises(joulecast.InputError, match="dtype"):
        joulecast.train_run("gpt2", "a100-sxm4-80gb", seq=512, global_batch=4, steps=1, dtype="fp8")


def test_a_full_fine_tune_that_does_not_fit_is_flagged():
    run = joulecast.train_run("llama-3-8b", "h100-sxm", seq=2048, global_batch=8, micro_batch=4, steps=1,
                              estimator="physics")
    assert "exceeds-memory" in run.flags and run.memory_gb > 80  # 16 bytes a parameter: 128 GB for 8B


@pytest.mark.parametrize("dtype, optimizer, grad, state", [
    ("fp32", "adamw", 4, 8), ("bf16", "adamw", 2, 4 + 8), ("fp32", "sgd", 4, 4), ("bf16", "sgd", 2, 4 + 4)])
def test_a_text_run_counts_a_parameter_s_bytes_as_a_vision_run_and_the_estimates_do(dtype, optimizer, grad, state):
    """A gradient at the weights' width, an fp32 master copy only for weights narrower than fp32, the optimizer's
    fp32 moments: 16 bytes a parameter with AdamW in fp32 and in mixed precision alike (ZeRO section 3.1), as
    `features.memory` counts a training estimate's (a text run's fp32 read 18, a 2-byte gradient and a master copy
    it has no use for)."""
    from joulecast.features.memory import GIB
    text = _run(dtype=dtype, optimizer=optimizer)
    vision = joulecast.train_run("resnet-50", "a100-sxm4-80gb", global_batch=8, steps=1, dtype=dtype,
                                 optimizer=optimizer, estimator="physics")
    for run in (text, vision):
        params = run.step.params
        assert run.memory_parts_gb["gradients"] == pytest.approx(params * grad / GIB, rel=1e-12)
        assert run.memory_parts_gb["optimizer"] == pytest.approx(params * state / GIB, rel=1e-12)
    if optimizer == "adamw":
        work = joulecast.workload("gpt2", phase="training", batch=4, seq=512, dtype=dtype)
        single = joulecast.estimate(work, "a100-sxm4-80gb", estimator="physics")
        assert work.params == text.step.params
        assert single.memory_parts_gb["optimizer"] == pytest.approx(work.params * (grad + state) / GIB, rel=1e-12)


def test_an_fp32_runs_activations_are_twice_as_wide_as_a_16_bit_runs():
    """Korthikanti et al.'s bytes a token are of 16-bit activations: an fp32 run keeps each at 4 bytes, every
    recomputation alike; fp16 and fp8 runs keep bf16's count. The loss's log-probabilities are fp32 in every run."""
    loss = 4 * 50257 * 4 * 512 / 2**30
    for recompute in ("none", "selective", "full"):
        runs = {d: _run(dtype=d, recompute=recompute, attention="eager") for d in ("bf16", "fp16", "fp32")}
        bf16 = runs["bf16"].memory_parts_gb["activations"]
        assert runs["fp32"].memory_parts_gb["activations"] == pytest.approx(2 * (bf16 - loss) + loss, rel=1e-12)
        assert runs["fp16"].memory_parts_gb["activations"] == pytest.approx(bf16, rel=1e-12)
    fp8 = joulecast.train_run("llama-3-8b", "h100-sxm", seq=512, global_batch=4, steps=1, dtype="fp8",
                              estimator="physics")
    bf16 = joulecast.train_run("llama-3-8b", "h100-sxm", seq=512, global_batch=4, steps=1, estimator="physics")
    assert fp8.memory_parts_gb["activations"] == pytest.approx(bf16.memory_parts_gb["activations"], rel=1e-12)


def test_the_loss_keeps_its_fp32_log_probabilities_a_head_token_on_the_last_stage():
    """The cross-entropy's log-probabilities (4 bytes a head token and output: `_log_softmax` keeps its result) join
    the activations whatever the layers recompute: an LM head's over the vocabulary (its shard under tensor parallelism),
    over the head's tokens alone; a task head's over its few outputs. Under a pipeline they sit on the last stage,
    beside its one micro-batch, where the first stage's several in flight outweigh them."""
    from joulecast.features.memory import GIB
    vocab, tokens = 128256, 4 * 2048

    def acts(**kw):
        kw = {"seq": 2048, "micro_batch": 4, "accumulation": 8, "estimator": "physics", **kw}
        return step_estimate("llama-3-8b", "h100-sxm", **kw).memory_parts_gb["activations"]

    full = acts(recompute="full")
    layers = tokens * 4096 * 32 * 2 / GIB  # each layer's input, 2 bytes
    assert full == pytest.approx(layers + 4 * vocab * tokens / GIB, rel=1e-12)
    half = acts(recompute="full", head_tokens=1024)  # the head over half of each sequence's tokens
    assert full - half == pytest.approx(4 * vocab * tokens / 2 / GIB, rel=1e-12)
    task = acts(recompute="full", head_outputs=2)
    assert task == pytest.approx(layers + 4 * 2 * tokens / GIB, rel=1e-12)
    tp = acts(recompute="full", layout=Layout(tp=4))
    assert tp == pytest.approx(layers + 4 * vocab / 4 * tokens / GIB, rel=1e-12)
    pipeline = acts(layout=Layout(pp=4))  # four micro-batches of a quarter of the layers on the first stage
    assert pipeline == pytest.approx(4 * tokens * 4096 * 8 * 34 / GIB, rel=1e-12)


def test_a_tensor_parallel_shard_does_a_quarter_of_the_layers_gemm_work():
    config = resolve_model("llama-3-70b")[0]
    shard = train_step.shard_config(config, tp=4, pp=2)
    assert shard["num_attention_heads"] == 16 and shard["num_key_value_heads"] == 2
    assert shard["intermediate_size"] == 7168 and shard["num_hidden_layers"] == 40
    full = step_estimate("llama-3-70b", "h100-sxm", seq=1024, micro_batch=1, accumulation=1, estimator="physics")
    part = step_estimate("llama-3-70b", "h100-sxm", seq=1024, micro_batch=1, accumulation=1, estimator="physics",
                         layout=Layout(tp=4, pp=2))
    assert part.params == pytest.approx(full.params / 8, rel=0.05)  # each stage keeps its 1/tp of the vocabulary
    # the GPU's own work (its busy time): an eighth of the GEMMs, a half of the layers' other kernels
    assert full.micro.gpu_busy_s / 10 < part.micro.gpu_busy_s < full.micro.gpu_busy_s / 5
    with pytest.raises(joulecast.InputError, match="layout.tp"):
        train_step.shard_config(config, tp=3)


def test_a_dense_masked_lm_head_and_cuda_graphs_cost_less_than_the_eager_full_head():
    base = dict(seq=512, global_batch=16, steps=2, estimator="physics")
    full = joulecast.train_run("bert-large", "h100-sxm", **base)
    masked = joulecast.train_run("bert-large", "h100-sxm", head_tokens=76, **base)
    graph = joulecast.train_run("bert-large", "h100-sxm", launch_mode="graph", **base)
    assert (full.head_tokens, masked.head_tokens, graph.launch_mode) == (512, 76, "graph")
    assert masked.time_s < full.time_s and masked.energy_j < full.energy_j
    assert graph.time_s < full.time_s
    # the head's GEMMs (forward, input and weight gradients) run over 16 x 76 tokens, not 16 x 512
    columns = masked.step.micro.kernel_columns
    sizes = np.stack([np.asarray(columns[c]) for c in ("m", "n", "k")], axis=1)
    head = (np.asarray(columns["kind"]) == "gemm") & (sizes == 30522).any(axis=1)
    assert head.sum() == 3 and set(sizes[head].ravel()) == {30522, 1024, 16 * 76}
    assert joulecast.train_run("bert-large", "h100-sxm", head_tokens=512, **base).energy_j == pytest.approx(
        full.energy_j, rel=1e-12)


def test_a_task_head_replaces_the_lm_head_with_weights_of_its_own_trained_whole_under_lora():
    """Fine-tuning BERT for SQuAD puts a 2-wide span head where the 30,522-wide masked-LM head was: its GEMMs run
    2 wide, its weights add to the model's (BERT's LM head is the embedding's), and LoRA trains it whole."""
    base = dict(seq=384, global_batch=16, steps=2, estimator="physics")
    lm = joulecast.train_run("bert-base", "a40", **base)
    qa = joulecast.train_run("bert-base", "a40", head_outputs=2, **base)
    assert (lm.head_outputs, qa.head_outputs) == (None, 2)
    assert qa.time_s < lm.time_s and qa.energy_j < lm.energy_j
    columns = qa.step.micro.kernel_columns
    sizes = np.stack([np.asarray(columns[c]) for c in ("m", "n", "k")], axis=1)
    gemm = np.asarray(columns["kind"]) == "gemm"
    assert not (sizes[gemm] == 30522).any() and (gemm & (sizes == 2).any(axis=1)).sum() == 3  # forward, both grads
    assert qa.step.params == lm.step.params + 2 * 768
    lora = dict(lora_rank=8, **base)
    lm_lora = joulecast.train_run("bert-base", "a40", **lora)
    qa_lora = joulecast.train_run("bert-base", "a40", head_outputs=2, **lora)
    assert qa_lora.step.trainable == lm_lora.step.trainable + 2 * 768  # the adapters, and the head whole
    assert joulecast.train_run("bert-base", "a40", head_outputs=30522, **base).step.params > lm.step.params


def test_eager_attention_materialises_its_scores_and_saves_them_for_the_backward():
    """Hugging Face's attention before SDPA: its scores' GEMMs and softmax, both ways, in place of the fused kernel;
    the scores a token saves a layer (5 bytes x heads x keys, Korthikanti et al.) back in the activations' memory,
    unless selective recomputation runs the attention again."""
    base = dict(seq=384, global_batch=8, steps=2, head_outputs=2, estimator="physics")
    flash = joulecast.train_run("bert-base", "a40", **base)
    eager = joulecast.train_run("bert-base", "a40", attention="eager", **base)
    assert (flash.attention, eager.attention) == ("flash", "eager") and eager.time_s > flash.time_s
    kinds = set(np.asarray(eager.step.micro.kernel_columns["kind"]).tolist())
    assert "attention" not in kinds and "softmax" in kinds
    scores = 8 * 384 * 12 * 5 * 12 * 384 / 2**30  # tokens x layers x 5 bytes x heads x keys, GiB
    assert eager.memory_parts_gb["activations"] - flash.memory_parts_gb["activations"] == pytest.approx(scores)
    selective = joulecast.train_run("bert-base", "a40", attention="eager", recompute="selective", **base)
    assert selective.memory_parts_gb["activations"] == pytest.approx(flash.memory_parts_gb["activations"])
    with pytest.raises(joulecast.InputError, match="attention"):
        step_estimate("bert-base", "a40", seq=384, micro_batch=8, accumulation=1, attention="eager",
                      layout=Layout(cp=2))


def test_fusions_drop_the_eager_kernels_from_forward_and_backward_and_are_reported():
    base = dict(seq=512, global_batch=16, steps=2, estimator="physics")
    eager = joulecast.train_run("bert-large", "h100-sxm", **base)
    fused = joulecast.train_run("bert-large", "h100-sxm", fusions="attention_layout,gemm_activation", **base)
    assert (eager.fusions, fused.fusions) == ((), ("attention_layout", "gemm_activation"))
    assert fused.time_s < eager.time_s and fused.energy_j < eager.energy_j
    ops = set(np.asarray(fused.step.micro.kernel_columns["op"]).tolist())
    assert {"gelu", "gelu_bwd"} <= set(np.asarray(eager.step.micro.kernel_columns["op"]).tolist())
    assert not {"gelu", "gelu_bwd", "copy", "copy_bwd"} & ops  # the epilogue's and the layout's kernels, both ways
    # the GEMMs and the attention are the same work
    def work(run):
        c = run.step.micro.kernel_columns
        keep = np.isin(np.asarray(c["kind"]), ["gemm", "attention"])
        return float(np.sum(np.asarray(c["flops"])[keep] * np.asarray(c["launches"])[keep]))
    assert work(fused) == pytest.approx(work(eager), rel=1e-12)


def test_a_framework_overhead_adds_its_time_to_every_forward_at_the_micro_step_s_power():
    base = dict(seq=512, global_batch=16, micro_batch=4, steps=3, estimator="physics")
    for recompute, forwards in (("none", 1), ("full", 2)):
        bare = joulecast.train_run("gpt2", "a10", recompute=recompute, **base)
        slow = joulecast.train_run("gpt2", "a10", recompute=recompute, forward_overhead_s=1e-3, **base)
        extra = 3 * 4 * forwards * 12 * 1e-3  # steps x micro-batches x forwards x GPT-2's layers x overhead
        assert (slow.forward_overhead_s, slow.step.overhead_s) == (1e-3, pytest.approx(12e-3))
        assert slow.time_s - bare.time_s == pytest.approx(extra, rel=1e-9)
        assert slow.energy_j - bare.energy_j == pytest.approx(extra * bare.step.micro.power_w, rel=1e-9)
        for lo_hi in (0, 1):
            assert slow.time_interval_s[lo_hi] - bare.time_interval_s[lo_hi] == pytest.approx(extra, rel=1e-9)


@pytest.mark.parametrize("kw, field", [
    (dict(head_tokens=513), "head_tokens"), (dict(head_tokens=0), "head_tokens"),
    (dict(head_outputs=0), "head_outputs"), (dict(head_outputs=2.5), "head_outputs"),
    (dict(attention="sdpa"), "attention"),
    (dict(forward_overhead_s=-1.0), "forward_overhead_s"), (dict(forward_overhead_s="3ms"), "forward_overhead_s"),
    (dict(fusions=["fused"]), "fusions"),
    (dict(launch_mode="fast"), "launch_mode"),
    (dict(micro_batch=3), "micro_batch"), (dict(steps=None), "steps"), (dict(tokens=5), "steps"),
    (dict(steps=2**60), r"steps: must be an integer from 1 to 2\^53, got 1152921504606846976"),
    (dict(recompute="some"), "recompute"), (dict(optimizer="lion"), "optimizer"), (dict(lora_rank=-1), "lora_rank"),
    (dict(global_batch=0), "global_batch"), (dict(lora_targets="mlp", lora_rank=4), "lora_targets"),
    (dict(lora_rank=10**5), "lora_rank: 100000 is not below gpt2's hidden size 768"),
])
def test_bad_run_settings_name_their_field(kw, field):
    with pytest.raises(joulecast.InputError, match=field):
        _run(**kw)


def test_cli_train_run_json(capsys):
    argv = ["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "train-run", "--seq", "256", "--global-batch",
            "8", "--micro-batch", "2", "--steps", "3", "--lora-rank", "4", "--estimator", "physics", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 3 and out["accumulation"] == 4 and out["finetune"] == "lora"
    assert out["energy_j"] == pytest.approx(out["power_w"] * out["time_s"])
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--steps", "3"]) == 2
    assert "--steps: applies to --phase train-run only" in capsys.readouterr().err
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "train-run", "--seq", "64"]) == 2
    assert "--global-batch" in capsys.readouterr().err
    assert main([*argv, "--launch-mode", "graph", "--head-tokens", "32"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["launch_mode"], out["head_tokens"]) == ("graph", 32)
    assert main([a for a in argv if a != "--json"] + ["--launch-mode", "graph", "--head-tokens", "32"]) == 0
    assert "launches   CUDA graphs; LM head over 32 of 256 tokens a sequence" in capsys.readouterr().out
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--head-tokens", "32"]) == 2
    assert "--head-tokens: applies to --phase train-run only" in capsys.readouterr().err
    assert main([*argv, "--head-outputs", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["head_outputs"] == 2
    assert main([a for a in argv if a != "--json"] + ["--head-outputs", "3"]) == 0
    assert "task head of 3 outputs over 256 of 256 tokens a sequence" in capsys.readouterr().out
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--head-outputs", "2"]) == 2
    assert "--head-outputs: applies to --phase train-run only" in capsys.readouterr().err
    assert main([*argv, "--attention", "eager"]) == 0
    assert json.loads(capsys.readouterr().out)["attention"] == "eager"
    assert main([a for a in argv if a != "--json"]) == 0
    assert "; flash attention" in capsys.readouterr().out
    assert main([*argv, "--fusions", "activation,attention_layout"]) == 0
    assert json.loads(capsys.readouterr().out)["fusions"] == ["activation", "attention_layout"]
    assert main([a for a in argv if a != "--json"] + ["--fusions", "activation"]) == 0
    assert "kernels    fused: activation" in capsys.readouterr().out
    # a fusion that changes none of the step's kernels (GPT-2's LayerNorm is one kernel already) is refused
    assert main([*argv, "--fusions", "norm"]) == 2
    assert "--fusions: 'norm' changes none of gpt2's kernels in training; leave it out" in capsys.readouterr().err
    assert main([*argv, "--fusions", "gelu"]) == 2
    err = capsys.readouterr().err
    assert f"fusions: unknown fusion 'gelu'; allowed: {', '.join(FUSIONS)}" in err and "rope" in err
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "generate", "--input-len", "8",
                 "--output-len", "4", "--fusions", "norm"]) == 2
    assert "--fusions: applies to single passes and --phase train-run, not to --phase generate" in \
        capsys.readouterr().err
    assert main([*argv, "--forward-overhead-s", "0.003"]) == 0
    assert json.loads(capsys.readouterr().out)["forward_overhead_s"] == 0.003
    assert main([a for a in argv if a != "--json"] + ["--forward-overhead-s", "0.003"]) == 0
    assert "the framework's 3 ms a layer and forward pass" in capsys.readouterr().out
    assert main([*argv, "--forward-overhead-s", "5"]) == 2
    assert "--forward-overhead-s: must be seconds from 0 to 1" in capsys.readouterr().err


def test_a_run_that_exceeds_its_gpu_says_what_would_fit_and_each_fit_does():
    """LoRA on an 8B model at 32 sequences of 2,048 a micro-batch passes the H100's 80 GiB in activations: the
    largest micro-batch dividing the global batch that fits, and full recomputation at a larger one; each, run
    again, fits with the memory it was given (selective recomputation fits no larger micro-batch: left out)."""
    big = dict(seq=2048, global_batch=64, steps=1, lora_rank=16, estimator="physics")
    run = joulecast.train_run("llama-3-8b", "h100-sxm", micro_batch=32, **big)
    assert "exceeds-memory" in run.flags
    assert [(f["recompute"], f["micro_batch"]) for f in run.fits] == [("none", 4), ("full", 32)]
    for f in run.fits:
        again = joulecast.train_run("llama-3-8b", "h100-sxm", micro_batch=f["micro_batch"], recompute=f["recompute"],
                                    **big)
        assert "exceeds-memory" not in again.flags and again.memory_gb == pytest.approx(f["memory_gb"], rel=1e-9)
        twice = 2 * f["micro_batch"]  # the next micro-batch dividing 64 would not fit
        if twice <= 64:
            assert "exceeds-memory" in joulecast.train_run("llama-3-8b", "h100-sxm", micro_batch=twice,
                                                           recompute=f["recompute"], **big).flags
    # full fine-tuning: the optimizer state alone passes the GPU, so nothing fits; a run that fits needs no advice
    full = joulecast.train_run("llama-3-8b", "h100-sxm", micro_batch=4, **{**big, "lora_rank": 0})
    assert "exceeds-memory" in full.flags and full.fits == ()
    assert _run().fits == () and "exceeds-memory" not in _run().flags


def test_the_cli_prints_what_would_fit(capsys):
    args = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "train-run", "--seq", "2048",
            "--global-batch", "64", "--steps", "1", "--estimator", "physics"]
    assert main([*args, "--micro-batch", "32", "--lora-rank", "16"]) == 0
    out = capsys.readouterr().out  # said before the figures: a memory check before a number
    assert "Instead: --micro-batch 4 (" in out and out.index("fits       no: needs") < out.index("energy ")
    assert main([*args, "--micro-batch", "4"]) == 0
    assert "(no micro-batch on one GPU: weights, gradients and optimizer state alone take" in capsys.readouterr().out
    assert main([*args, "--micro-batch", "32", "--lora-rank", "16", "--json"]) == 0
    assert [f["micro_batch"] for f in json.loads(capsys.readouterr().out)["fits"]] == [4, 32]


def test_a_sequence_too_long_even_fully_recomputed_fits_no_micro_batch(capsys):
    """LoRA keeps an 8B model's state at 15 GiB of an A10's 24, but one sequence of 131,072 tokens, fully recomputed,
    still needs more: nothing fits, and the table says which part is too big."""
    run = joulecast.train_run("llama-3-8b", "a10", seq=131072, global_batch=1, steps=1, lora_rank=8,
                              estimator="physics")
    assert "exceeds-memory" in run.flags and run.fits == ()
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "a10", "--phase", "train-run", "--seq", "131072",
                 "--global-batch", "1", "--steps", "1", "--lora-rank", "8", "--estimator", "physics"]) == 0
    assert "Instead: shard over GPUs, joulecast plan (no micro-batch on one GPU, not one sequence fully recomputed)" \
        in capsys.readouterr().out


def test_a_run_no_gpu_holds_names_the_fewest_gpus_whose_zero_3_shards_would(capsys):
    """Llama-3-70B's 1,051 GiB of weights, gradients and AdamW state: not one sequence on an H100; sharded by ZeRO
    stage 3 over 32 GPUs beside one sequence's activations, 76.3 GiB a GPU, exactly what `joulecast plan` finds on 32
    H100s, where 16 do not fit; said in the table, the JSON and auto's refusal; none where the global batch has too
    few sequences for the GPUs it would take."""
    from joulecast.data.job_file import parse_job
    from joulecast.estimator.plan import site_compute

    kw = dict(seq=2048, global_batch=64, steps=10, micro_batch=1, estimator="physics")
    run = joulecast.train_run("llama-3-70b", "h100-sxm", **kw)
    assert run.fits == () and run.fits_sharded["gpus"] == 32 and run.fits_sharded["zero"] == 3
    job = dict(name="t", model="llama-3-70b", seq=2048, global_batch=64, micro_batch=1, steps=10,
               estimator="physics", layout=dict(zero=3), strategies=["ddp"])
    site = site_compute(parse_job({**job, "sites": [dict(name="a", gpu="h100-sxm", gpus=32)]}))[0]
    assert site.step.memory_gb == pytest.approx(run.fits_sharded["memory_gb"], rel=1e-12) and site.step.memory_gb <= 80
    with pytest.raises(joulecast.InputError, match="does not fit under layout"):
        site_compute(parse_job({**job, "sites": [dict(name="a", gpu="h100-sxm", gpus=16)]}))
    assert joulecast.train_run("llama-3.1-405b", "a10", **kw).fits_sharded is None  # 64 sequences, 512 GPUs
    argv = ["estimate", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--phase", "train-run", "--seq", "2048",
            "--global-batch", "64", "--steps", "10", "--estimator", "physics"]
    assert main([*argv, "--micro-batch", "1"]) == 0
    assert "shard over GPUs, joulecast plan: ZeRO 3 over 32 GPUs fits, 76.3 GiB a GPU" in capsys.readouterr().out
    assert main([*argv, "--micro-batch", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits_sharded"]["gpus"] == 32
    assert main([*argv, "--micro-batch", "auto"]) == 2
    assert "sharding over GPUs (joulecast plan: ZeRO 3 over 32 GPUs fits, 76.33 GiB a GPU)" in capsys.readouterr().err


def test_a_vision_models_run_is_over_images_its_memory_from_the_kernel_table():
    """A vision model trains over images: `global_batch` images a step, `tokens` counting images (`seq` 1), each step
    its accumulated micro-steps (the `training` phase's kernels less its AdamW update) and one update; its memory the
    weights, gradients and optimizer state a parameter and the activations the kernel table keeps."""
    from joulecast.features.memory import GIB

    run = joulecast.train_run("resnet-50", "v100-pcie-16gb", global_batch=128, micro_batch=64, tokens=1000,
                              dtype="fp32", estimator="physics")
    step = run.step
    assert (run.unit, run.seq, run.steps, run.tokens, run.accumulation) == ("image", 1, 8, 8 * 128, 2)
    assert run.energy_j == pytest.approx(8 * (2 * step.micro.energy_j + step.optimizer.energy_j), rel=1e-12)
    assert run.energy_per_token_j == pytest.approx(run.energy_j / run.tokens) and run.attention == "none"
    assert not (step.micro.kernel_columns["op"] == "adamw").any()
    assert (step.optimizer.kernel_columns["op"] == "adamw").all()
    # fp32 weights: a 4-byte gradient and AdamW's two fp32 moments, no master copy; SGD's one momentum
    params = step.params
    assert run.memory_parts_gb["weights"] == pytest.approx(params * 4 / GIB)
    assert run.memory_parts_gb["gradients"] == pytest.approx(params * 4 / GIB)
    assert run.memory_parts_gb["optimizer"] == pytest.approx(params * 8 / GIB)
    sgd = joulecast.train_run("resnet-50", "v100-pcie-16gb", global_batch=128, micro_batch=64, steps=1, dtype="bf16",
                              optimizer="sgd", estimator="physics")
    assert sgd.memory_parts_gb["gradients"] == pytest.approx(params * 2 / GIB)
    assert sgd.memory_parts_gb["optimizer"] == pytest.approx(params * (4 + 4) / GIB)  # master copy and momentum
    # one micro-batch's activations, as the training phase's step of that batch keeps them
    single = joulecast.estimate(joulecast.workload("resnet-50", phase="training", batch=64, dtype="fp32"),
                                "v100-pcie-16gb", estimator="physics")
    assert run.memory_parts_gb["activations"] == pytest.approx(single.memory_parts_gb["activation"], rel=1e-12)
    # a step that does not fit says which micro-batch would: ResNet-50 in fp32 holds 128 images on 16 GB, not 256
    big = joulecast.train_run("resnet-50", "v100-pcie-16gb", global_batch=512, steps=1, dtype="fp32",
                              estimator="physics")
    assert "exceeds-memory" in big.flags and [f["micro_batch"] for f in big.fits] == [128]


@pytest.mark.parametrize("kw, field", [(dict(seq=224), "seq"), (dict(lora_rank=8), "lora_rank"),
                                       (dict(recompute="full"), "recompute"), (dict(head_outputs=2), "head_outputs"),
                                       (dict(fusions=("norm",)), "fusions"), (dict(lora_targets="attention"),
                                                                              "lora_targets"),
                                       (dict(forward_overhead_s=1e-4), "forward_overhead_s")])
def test_a_vision_run_refuses_a_sequence_and_a_text_models_options(kw, field):
    with pytest.raises(joulecast.InputError, match=rf"^{field}: "):
        joulecast.train_run("resnet-50", "a10", global_batch=8, steps=1, estimator="physics", **kw)


def test_a_text_models_run_needs_its_sequence_length():
    with pytest.raises(joulecast.InputError, match=r"^seq: required for gpt2's run: tokens a sequence"):
        joulecast.train_run("gpt2", "a10", global_batch=8, steps=1, estimator="physics")


def test_the_cli_service_and_sweep_run_a_vision_model_over_images(capsys):
    from joulecast.service import estimate_one

    assert main(["estimate", "--model", "resnet-50", "--gpu", "a10", "--phase", "train-run", "--global-batch", "32",
                 "--micro-batch", "16", "--steps", "3", "--estimator", "physics"]) == 0
    out = capsys.readouterr().out
    assert "3 steps x 32 images (96 images)" in out and " J an image, " in out and "images/s" in out
    assert "attention" not in out and "LM head" not in out
    body = {"model": "resnet-50", "gpu": "a10", "phase": "train-run", "global_batch": 32, "steps": 3}
    assert estimate_one(body, "physics")["unit"] == "image"
    points = joulecast.sweep("resnet-50", "a10", phase="train-run", global_batch=32, steps=3, micro_batch=[8, 32],
                             estimator="physics").points
    assert points["seq"].tolist() == [1, 1] and points["micro_batch"].tolist() == [8, 32]
    with pytest.raises(joulecast.InputError, match=r"^seq: has no effect with resnet-50"):
        joulecast.sweep("resnet-50", "a10", phase="train-run", global_batch=32, steps=3, seq=224,
                        estimator="physics")


def test_a_slow_input_pipeline_paces_each_step_and_the_gpu_waits_at_idle_power():
    from joulecast.features.power import idle_power_w

    base = dict(global_batch=64, micro_batch=32, steps=5, dtype="bf16")
    fed = joulecast.train_run("resnet-50", "a100-pcie-40gb", **base)  # the shipped model: an interval
    assert (fed.loader_rate, fed.loader_wait_s) == (None, 0.0) and "input-bound" not in fed.flags
    rate = 0.5 * base["global_batch"] / fed.step_time_s  # half the images a second the GPU takes
    slow = joulecast.train_run("resnet-50", "a100-pcie-40gb", loader_rate=rate, **base)
    floor = base["global_batch"] / rate
    idle = float(idle_power_w(joulecast.gpu("a100-pcie-40gb"), joulecast.gpu("a100-pcie-40gb").boost_clock_mhz))
    assert slow.step_time_s == pytest.approx(floor, rel=1e-12) and slow.time_s == pytest.approx(5 * floor, rel=1e-12)
    assert slow.loader_wait_s == pytest.approx(slow.time_s - fed.time_s, rel=1e-9)
    assert slow.energy_j - fed.energy_j == pytest.approx(idle * slow.loader_wait_s, rel=1e-9)
    assert slow.tokens_per_s == pytest.approx(rate, rel=1e-9) and "input-bound" in slow.flags
    assert slow.energy_interval_j[0] <= slow.energy_j <= slow.energy_interval_j[1]
    # the faster end of the interval waits longer: neither end's time below the pipeline's
    assert slow.time_interval_s == (pytest.approx(5 * floor), pytest.approx(5 * floor))
    assert slow.energy_interval_j[0] > fed.energy_interval_j[0]
    # a pipeline that keeps up changes nothing, to the bit
    quick = joulecast.train_run("resnet-50", "a100-pcie-40gb", loader_rate=4 * rate, **base)
    assert (quick.energy_j, quick.time_s, quick.energy_interval_j, quick.loader_wait_s) == (
        fed.energy_j, fed.time_s, fed.energy_interval_j, 0.0) and "input-bound" not in quick.flags
    # at a lower locked clock the GPU idles lower
    locked = joulecast.train_run("resnet-50", "a100-pcie-40gb", loader_rate=rate / 4, sm_clock_mhz=900, **base)
    bare = joulecast.train_run("resnet-50", "a100-pcie-40gb", sm_clock_mhz=900, **base)
    idle_900 = float(idle_power_w(joulecast.gpu("a100-pcie-40gb"), 900.0))
    assert idle_900 < idle
    assert locked.energy_j - bare.energy_j == pytest.approx(idle_900 * locked.loader_wait_s, rel=1e-9)


@pytest.mark.parametrize("rate", [0, 1e-300, -3.0, float("nan"), float("inf"), 2e9, True, "fast", [100]])
def test_a_bad_input_pipeline_rate_names_its_field(rate):
    with pytest.raises(joulecast.InputError, match="^loader_rate: must be samples a second"):
        _run(loader_rate=rate)


def test_the_cli_service_and_sweep_take_an_input_pipeline_rate(capsys):
    from joulecast.service import estimate_one

    argv = ["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "train-run", "--seq", "256", "--global-batch",
            "8", "--steps", "3", "--estimator", "physics"]
    assert main([*argv, "--loader-rate", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["loader_rate"] == 2.0 and out["step_time_s"] == pytest.approx(4.0) and "input-bound" in out["flags"]
    assert main([*argv, "--loader-rate", "2"]) == 0
    text = capsys.readouterr().out
    assert "input      2.000 sequences/s from the input pipeline; the GPU waits for it" in text
    assert "input-bound: the input pipeline is slower than the GPU" in text
    assert main([*argv, "--loader-rate", "0"]) == 2
    assert "--loader-rate: must be samples a second" in capsys.readouterr().err
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--loader-rate", "5"]) == 2
    assert "--loader-rate: applies to --phase train-run only" in capsys.readouterr().err
    body = {"model": "resnet-50", "gpu": "a10", "phase": "train-run", "global_batch": 32, "steps": 3,
            "loader_rate": 16.0}
    http = estimate_one(body, "physics")
    assert http["step_time_s"] == pytest.approx(2.0) and http["loader_rate"] == 16.0
    points = joulecast.sweep("resnet-50", "a10", phase="train-run", global_batch=32, steps=3, micro_batch=[8, 32],
                             loader_rate=16.0, estimator="physics").points
    assert points["time_s"].tolist() == pytest.approx([6.0, 6.0]) and points["flags"].str.contains("input-bound").all()


def test_evaluations_run_whole_global_batches_of_forward_passes_and_add_to_the_run():
    base = dict(seq=512, global_batch=16, micro_batch=4, steps=20)
    bare = joulecast.train_run("gpt2", "a100-pcie-40gb", **base)
    # 10 global batches' worth and one sequence more, over two evaluations: each rounds up to 6 global batches
    run = joulecast.train_run("gpt2", "a100-pcie-40gb", eval_tokens=16 * 512 * 10 + 512, evals=2,
                              forward_overhead_s=1e-4, **base)
    fwd, passes = run.step.forward, 2 * 6 * 4  # evaluations x global batches x micro-batches
    overhead = 12 * 1e-4  # GPT-2's layers x the framework's overhead a layer, each forward
    assert run.eval_time_s == pytest.approx(passes * (fwd.time_s + overhead), rel=1e-12)
    assert run.eval_energy_j == pytest.approx(passes * (fwd.time_s + overhead) * fwd.power_w, rel=1e-12)
    trained = joulecast.train_run("gpt2", "a100-pcie-40gb", forward_overhead_s=1e-4, **base)
    assert run.time_s == pytest.approx(trained.time_s + run.eval_time_s, rel=1e-12)
    assert run.energy_j == pytest.approx(trained.energy_j + run.eval_energy_j, rel=1e-12)
    for got, train, part in ((run.energy_interval_j, trained.energy_interval_j, fwd.energy_interval_j),
                             (run.time_interval_s, trained.time_interval_s, fwd.time_interval_s)):
        for end in (0, 1):
            extra = passes * (part[end] + overhead * (fwd.power_w if got is run.energy_interval_j else 1.0))
            assert got[end] == pytest.approx(train[end] + extra, rel=1e-9)
    assert (run.step_time_s, run.tokens, run.eval_tokens, run.evals) == (trained.step_time_s, bare.tokens,
                                                                         16 * 512 * 10 + 512, 2)
    assert bare.eval_time_s == bare.eval_energy_j == 0.0 and bare.step.forward is None


def test_a_vision_run_evaluates_with_inference_passes_which_its_input_pipeline_paces_too():
    base = dict(global_batch=64, micro_batch=32, steps=4, estimator="physics")
    run = joulecast.train_run("resnet-50", "a10", eval_tokens=640, **base)
    fwd = run.step.forward
    assert fwd.workload == "resnet-50/forward/b32" and run.eval_time_s == pytest.approx(10 * 2 * fwd.time_s)
    inference = joulecast.estimate(joulecast.workload("resnet-50", phase="inference", batch=32), "a10",
                                   estimator="physics")
    assert fwd.energy_j == pytest.approx(inference.energy_j, rel=1e-12)
    slow = joulecast.train_run("resnet-50", "a10", eval_tokens=640, loader_rate=16.0, **base)
    assert slow.eval_time_s == pytest.approx(10 * 64 / 16.0) and slow.time_s == pytest.approx(14 * 64 / 16.0)


@pytest.mark.parametrize("kw, field", [(dict(evals=0), "evals"), (dict(evals=2), "evals: splits eval_tokens"),
                                       (dict(eval_tokens=-1), "eval_tokens"), (dict(eval_tokens=1.5), "eval_tokens")])
def test_bad_evaluations_name_their_field(kw, field):
    with pytest.raises(joulecast.InputError, match=f"^{field}"):
        _run(**kw)


def test_micro_batch_auto_takes_the_largest_that_fits_the_gpu(capsys):
    """`micro_batch="auto"`: the largest micro-batch dividing the global batch whose memory fits the GPU (the fewest
    accumulated), the global batch where it fits; where none does, one line naming micro_batch with what would fit
    instead; on the CLI `--micro-batch auto`, its table saying so and its JSON `micro_batch_auto`."""
    kw = dict(global_batch=64, seq=2048, steps=10, lora_rank=16, estimator="physics")
    auto = joulecast.train_run("llama-3-8b", "h100-sxm", micro_batch="auto", **kw)
    assert auto.micro_batch == 4 and auto.accumulation == 16 and auto.micro_batch_auto
    assert auto.memory_gb <= 80 and "exceeds-memory" not in auto.flags
    given = joulecast.train_run("llama-3-8b", "h100-sxm", micro_batch=4, **kw)
    assert auto.energy_j == pytest.approx(given.energy_j, rel=1e-12) and not given.micro_batch_auto
    assert "exceeds-memory" in joulecast.train_run("llama-3-8b", "h100-sxm", micro_batch=8, **kw).flags
    small = joulecast.train_run("gpt2", "h100-sxm", global_batch=8, seq=512, steps=10, micro_batch="auto",
                                estimator="physics")
    assert small.micro_batch == 8 and small.accumulation == 1  # the whole global batch fits
    images = joulecast.train_run("resnet-50", "a10", global_batch=1024, tokens=100_000, dtype="bf16",
                                 micro_batch="auto", estimator="physics")
    assert images.micro_batch == 256 and images.memory_gb <= 24
    assert "exceeds-memory" in joulecast.train_run("resnet-50", "a10", global_batch=1024, tokens=100_000,
                                                   dtype="bf16", micro_batch=512, estimator="physics").flags
    with pytest.raises(joulecast.InputError, match=r"^micro_batch: auto: not one sequence a micro-batch fits a10's "
                                                   r"24 GiB with recompute none; recompute full with micro_batch 2 "
                                                   r"would$"):
        joulecast.train_run("llama-3-8b", "a10", global_batch=8, seq=4096, steps=10, lora_rank=8,
                            micro_batch="auto", estimator="physics")
    with pytest.raises(joulecast.InputError, match=r"^micro_batch: auto: .*the weights, gradients and optimizer "
                                                   r"state alone take 1,05\d GiB: .*joulecast plan\)$"):
        joulecast.train_run("llama-3-70b", "h100-sxm", global_batch=8, seq=2048, steps=10, micro_batch="auto",
                            estimator="physics")
    with pytest.raises(joulecast.InputError, match=r"^micro_batch: must be a whole number or 'auto'"):
        joulecast.train_run("gpt2", "h100-sxm", global_batch=8, seq=512, steps=10, micro_batch="most")
    base = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "train-run", "--global-batch", "64",
            "--seq", "2048", "--steps", "10", "--lora-rank", "16", "--micro-batch", "auto", "--estimator", "physics"]
    assert main(base) == 0
    assert "micro-batch 4, 16 accumulated a step (auto: the largest that fits)" in capsys.readouterr().out
    assert main([*base, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["micro_batch"] == 4 and out["micro_batch_auto"] is True
