import json
from collections import Counter

import pytest
from conftest import require_module

from joulecast.cli import main
from joulecast.data.collect.plan import PLAN_DIR, expected_durations, load_plan, parse_plan
from joulecast.data.errors import InputError
from joulecast.features.arch import HOST_DISPATCH_S
from joulecast.features.kernel_specs import kernel_workload


def test_shipped_h200_plan_fits_eight_minutes(capsys):
    plan = load_plan("h200-first")
    kinds = {(it.op or it.phase) for it in plan.items}
    assert {"gemm", "attention", "rmsnorm", "layernorm", "softmax", "add", "silu", "prefill", "decode", "training"} <= kinds
    assert {it.dtype for it in plan.items if it.op == "gemm"} == {"bf16", "fp8"}
    assert main(["collect", "h200-first", "--dry-run", "--json", "--out", "/nonexistent-store"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["items"] == len(plan.items) and 0 < summary["expected_s"] <= 8 * 60
    total = sum(e.seconds for e in expected_durations(plan)) + 2 * plan.settings.idle_s
    assert summary["expected_s"] == pytest.approx(total, abs=0.1)


def test_the_other_shipped_h200_plans_hold_out_new_configurations_and_repeat_old_ones():
    first = {it.id for it in load_plan("h200-first").items}
    holdout, repeat = load_plan("h200-holdout"), load_plan("h200-repeat")
    assert not first & {it.id for it in holdout.items} and len(holdout.items) == 32  # none measured twice
    assert {it.id for it in repeat.items} <= first and len(repeat.items) == 20
    assert holdout.settings == repeat.settings == load_plan("h200-first").settings


def test_grid_and_shapes_expand_and_ids_are_stable():
    raw = {"name": "p", "gpu": "h100", "kernels": [
        {"op": "gemm", "dtype": ["bf16", "fp16"], "grid": {"m": [1, 2], "n": [8], "k": [16]}, "shapes": [{"m": 4, "n": 4, "k": 4}]}],
        "models": [{"model": "gpt2", "phase": ["prefill", "decode"], "batch": [1, 4], "seq": 128}]}
    plan = parse_plan(raw)
    assert plan.gpu == "h100-sxm" and len(plan.items) == 2 * 3 + 4
    assert plan.items[0].id == "gemm/m4/n4/k4/bf16" and plan.items[-1].id == "gpt2/decode/b4/s128/bf16"
    assert [it.id for it in parse_plan(raw).items] == [it.id for it in plan.items]


@pytest.mark.parametrize("raw, message", [
    ({"gpu": "h200", "kernels": []}, "name: the collection id is missing"),
    ({"name": "../../etc", "gpu": "h200", "kernels": [{"op": "add", "shapes": [{"elements": 8}]}]},
     "name: must be a letter or digit, then letters, digits, '.', '_' or '-'"),
    ({"name": "p", "gpu": "h900", "kernels": [{"op": "add", "shapes": [{"elements": 8}]}]}, "gpu: unknown 'h900'"),
    ({"name": "p", "gpu": "h200"}, "kernels: the plan has no kernels, models or waits"),
    ({"name": "p", "gpu": "h200", "kernels": [{"op": "conv", "shapes": [{"m": 1}]}]}, "kernels[0].shapes[0].op: unknown 'conv'"),
    ({"name": "p", "gpu": "h200", "kernels": [{"op": "gemm", "shapes": [{"m": 1, "n": 0, "k": 2}]}]},
     "kernels[0].shapes[0].n: must be a whole number from 1 to 2^40, got a number (0)"),
    ({"name": "p", "gpu": "h200", "kernels": [{"op": "gemm", "shapes": [{"m": 1e300, "n": 8, "k": 2}]}]},
     "kernels[0].shapes[0].m: must be a whole number from 1 to 2^40, got a number"),  # once numpy's OverflowError
    ({"name": "p", "gpu": "h200", "models": [{"model": "bert-large", "phase": "decode"}]},
     "models[0].phase: 'decode' is not available"),
    ({"name": "p", "gpu": "h200", "models": [{"model": "gpt2"}, {"model": "gpt2", "batch": 1.5}]},
     "models[1].batch: must be an integer from 1 to 16,777,216, got 1.5"),
    ({"name": "p", "gpu": "h200", "settings": {"repeats": 2}, "kernels": [{"op": "add", "shapes": [{"elements": 8}]}]},
     "settings.repeats: must be at least 3"),
    ({"name": "p", "gpu": "h200", "settings": {"window": 2}, "kernels": [{"op": "add", "shapes": [{"elements": 8}]}]},
     "settings.window: unknown"),
    ({"name": "p", "gpu": "h200", "settings": {"repeats": float("inf")}, "kernels": [{"op": "add", "shapes": [{"elements": 8}]}]},
     "settings.repeats: must be a finite non-negative number, got inf"),
])
def test_bad_plans_name_the_field(raw, message):
    """Each message names the entry of the plan that holds the value (a lowering's check knew only `batch`)."""
    with pytest.raises(InputError) as err:
        parse_plan(raw)
    assert message in str(err.value)


def test_collect_without_a_gpu_is_one_line(tmp_path, capsys):
    """With the [collect] extra but no NVIDIA GPU (where the extra is missing, `test_cli` checks the line that names
    it)."""
    for module in ("torch", "pynvml"):
        require_module(module, "the [collect] extra", "JOULECAST_REQUIRE_TORCH")
    plan = tmp_path / "p.yaml"
    plan.write_text("name: p\ngpu: h200\nkernels: [{op: add, shapes: [{elements: 8}]}]\n")
    assert main(["collect", str(plan), "--out", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("joulecast: error: ") and err.count("\n") == 1 and "GPU" in err


def test_counts_written_with_an_exponent_are_the_integers_they_name():
    """A plan's YAML reads 1e9 as a float (the loader's resolver): a kernel's sizes, a model's batch and length and a
    wait's microseconds take it as the integer it names, ids and all (before: 'must be a positive integer, got
    1000000000.0')."""
    plan = parse_plan({"name": "p", "gpu": "h200", "kernels": [{"op": "add", "shapes": [{"elements": 1e9}]}],
                       "models": [{"model": "gpt2", "batch": 1e1, "seq": 5.12e2}], "waits": [{"us": 1e3}]})
    assert [it.id for it in plan.items] == ["add/elements1000000000/bf16", "gpt2/prefill/b10/s512/bf16",
                                            "wait/spin/us1000"]
    assert plan.items[1].batch == 10 and isinstance(plan.items[1].batch, int)


@pytest.mark.parametrize("flags, line", [
    (["--collection", "../../etc"], "--collection: must be a letter or digit, then letters, digits, '.', '_' or '-' "
                                    "(at most 128; one folder of the store), got '../../etc'"),
    (["--collection", "a/b"], "--collection: must be a letter or digit"),
    (["--gpu-index", "-1"], "--gpu-index: must be a GPU's index, 0 or more, got -1")])
def test_a_collection_stays_in_its_store_and_a_gpu_index_is_one(tmp_path, capsys, flags, line):
    """Before, --collection ../../etc made the store's folder outside the store, and --gpu-index -1 was taken."""
    assert main(["collect", "h200-first", "--dry-run", "--out", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"joulecast: error: {line}")
    ok = ["collect", "h200-first", "--dry-run", "--json", "--out", str(tmp_path), "--collection", "h200-1.b_c"]
    assert main(ok) == 0
    assert json.loads(capsys.readouterr().out)["collection"] == "h200-1.b_c"


def test_a_missing_plan_is_one_line(tmp_path, capsys):
    assert main(["collect", str(tmp_path / "missing.yaml"), "--dry-run"]) == 2
    assert "PLAN: " in capsys.readouterr().err


def test_dry_run_needs_neither_xgboost_nor_mlflow(tmp_path):
    """The GPU machine has torch but not xgboost or mlflow: planning and collecting must not import them."""
    import subprocess
    import sys

    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('xgboost', 'mlflow'):\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from joulecast.cli import main\n"
            f"sys.exit(main(['collect', 'h200-first', '--dry-run', '--json', '--out', {str(tmp_path)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gpu"] == "h200"


def test_a_plan_of_waits_measures_the_gpu_waiting_and_never_trains():
    plan = load_plan("h200-waiting")
    waits = [it for it in plan.items if it.kind == "wait"]
    assert {it.op for it in waits} == {"spin", "idle-context"} and {it.sizes["us"] for it in waits} == {100, 1000, 10000}
    assert all(it.workload_ref is None and it.phase == "wait" for it in waits)
    durations = {e.item.id: e for e in expected_durations(plan)}
    assert durations["wait/spin/us1000"].physics_time_s == pytest.approx(1e-3)
    with pytest.raises(InputError, match=r"waits\[0\].mode"):
        parse_plan({"name": "w", "gpu": "h200", "waits": [{"mode": "nap"}]})
    with pytest.raises(InputError, match=r"waits\[0\].us"):
        parse_plan({"name": "w", "gpu": "h200", "waits": [{"mode": "spin", "us": 5}]})


def test_the_thermal_plan_heats_the_die_before_it_spins_and_fits_a_device_session():
    """h200-thermal (issue 31): the GEMM first, then the spinning kernel whose windows watch the die cool; long
    windows, and the whole plan within a few minutes of a lent GPU's fifteen."""
    plan = load_plan("h200-thermal")
    assert [it.kind for it in plan.items] == ["kernel", "wait"] and plan.items[1].op == "spin"
    assert plan.settings.min_window_s >= 20
    assert sum(e.seconds for e in expected_durations(plan)) < 4 * 60


def test_the_dispatch_plan_is_host_bound_in_physics_and_fits_a_device_session():
    """h200-dispatch (issue 31): every item so small that physics puts its time a launch at the assumed eager dispatch
    (its kernel well under it), so what the machine measures is its own dispatch; a minute or two of a lent GPU."""
    plan = load_plan("h200-dispatch")
    durations = expected_durations(plan)
    assert {e.item.op for e in durations} == {"add", "gelu", "gemm", "layernorm", "softmax"}
    dispatch = HOST_DISPATCH_S["eager"]
    assert all(dispatch <= e.physics_time_s < 1.1 * dispatch for e in durations)
    assert sum(e.seconds for e in durations) < 2 * 60


def test_model_references_name_the_fusions_the_runner_applies():
    """The PyTorch runner runs GPT-2's tanh GELU as one kernel, which Hugging Face's code runs as eight: its items'
    references ask the lowering for that fusion, so that the physics of a measured pass has the kernels that ran.
    Llama's gated MLP is run as lowered, so its references name none."""
    from joulecast.data.workload_ref import as_run
    from joulecast.features.refs import resolve

    plan = parse_plan({"name": "p", "gpu": "h200", "models": [{"model": ["gpt2", "llama-3-8b"], "seq": 128}]})
    refs = {it.model: it.workload_ref for it in plan.items}
    assert refs["gpt2"].endswith("&fusions=activation") and "fusions" not in refs["llama-3-8b"]
    elementwise = resolve(refs["gpt2"]).kernels.query("kind == 'elementwise'")
    assert elementwise.loc[elementwise["op"] == "gelu", "count"].sum() == 12  # one a layer
    assert not {"tanh", "scalar_mul"} & set(elementwise["op"])
    # a reference that names its fusions, and any other scheme, is left as it is
    assert as_run("catalog:gpt2?phase=prefill&fusions=norm") == "catalog:gpt2?phase=prefill&fusions=norm"
    assert as_run("kernel:gemm?m=8&n=8&k=8&dtype=bf16") == "kernel:gemm?m=8&n=8&k=8&dtype=bf16"


def _tiny(model: str, layers: int) -> dict:
    """A catalog model's config shrunk to `layers` layers of width 64 (four heads; two key-value heads where the
    family groups them), for counting what the runner dispatches on the CPU."""
    from joulecast.data.models import model_entry

    return {**model_entry(model)["config"], "num_hidden_layers": layers, "n_layer": layers, "hidden_size": 64,
            "n_embd": 64, "intermediate_size": 128, "ffn_dim": 128, "num_attention_heads": 4, "n_head": 4,
            "num_key_value_heads": 2, "vocab_size": 128, "word_embed_proj_dim": 64}


def _dispatched(config: dict, attention: str = "flash", dtype: str = "bfloat16") -> Counter:
    """The ATen ops a prefill of the runner's model dispatches, counted by name (its second call: masks built)."""
    torch = require_module("torch", "the [collect] extra (torch)", "JOULECAST_REQUIRE_TORCH")
    from torch.utils._python_dispatch import TorchDispatchMode

    from joulecast.data.collect.torch_models import Transformer

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    model = Transformer(config, attention=attention).to(getattr(torch, dtype)).eval()
    tokens = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        model(tokens)
        with Ops() as ops:
            model(tokens)
    return ops.names


def _a_layer(model: str, attention: str) -> tuple[Counter, Counter]:
    """A layer's (ATen ops the runner dispatched, kernels the lowering lists by kind and op): two layers' less one's."""
    from joulecast.features.lowering import workload

    def listed(layers: int) -> Counter:
        k = workload(_tiny(model, layers), phase="prefill", batch=2, seq=8, attention=attention).kernels
        return Counter({key: int(n) for key, n in k.groupby(["kind", "op"])["count"].sum().items()})

    return (_dispatched(_tiny(model, 2), attention) - _dispatched(_tiny(model, 1), attention),
            listed(2) - listed(1))


def test_the_runners_gpt2_activation_is_one_kernel():
    """What `RUNNER_FUSIONS` says of the runner, checked on it: one GPT-2 block's MLP dispatches a single gelu and
    none of the eight pieces of Hugging Face's tanh GELU."""
    ops = _dispatched(_tiny("gpt2", 1), dtype="float32")
    assert ops["gelu"] == 1 and ops["tanh"] == 0 and ops["pow"] == 0


def test_eager_items_ask_the_lowering_for_hugging_faces_eager_kernels_and_only_where_the_runner_has_them():
    """`attention: eager` (GPT-2 prefill, the EnergAIzer tracer's method): the item's id says so, its reference asks
    for eager attention and no fusions, and the store reads it as written; any other family or phase is refused with
    the field named."""
    from joulecast.data.workload_ref import as_run

    plan = parse_plan({"name": "p", "gpu": "h200",
                       "models": [{"model": "gpt2", "batch": 32, "seq": 1024, "attention": ["flash", "eager"]}]})
    by_attention = {it.attention: it for it in plan.items}
    eager = by_attention["eager"]
    assert eager.id == "gpt2/prefill/b32/s1024/bf16/eager" and by_attention["flash"].id == "gpt2/prefill/b32/s1024/bf16"
    assert "attention=eager" in eager.workload_ref and "fusions" not in eager.workload_ref
    assert as_run(eager.workload_ref) == eager.workload_ref
    for entry, why in (({"model": "vit-large", "attention": "eager"}, "bert, gpt2, llama, opt"),
                       ({"model": "gpt2", "phase": "decode", "attention": "eager"}, "prefill"),
                       ({"model": "gpt2", "attention": "sdpa"}, "flash, eager, masked")):
        with pytest.raises(InputError, match=r"models\[0\]\.attention") as err:
            parse_plan({"name": "p", "gpu": "h200", "models": [entry]})
        assert why in str(err.value)


def test_masked_items_lower_the_memory_efficient_kernel_over_every_key_block_and_only_for_llama_prefill():
    """`attention: masked` (Llama-2 as transformers 4.38-4.39 ran it, Wilkins' generations): the item's id and
    reference say so, its kernels hold one `masked` attention a layer, told no causality (every key block computed);
    other families and phases are refused with the field named."""
    from joulecast.data.collect.plan import item_workload

    plan = parse_plan({"name": "p", "gpu": "h200",
                       "models": [{"model": "llama-2-7b", "seq": 4096, "attention": ["flash", "masked"]}]})
    by_attention = {it.attention: it for it in plan.items}
    masked, flash = by_attention["masked"], by_attention["flash"]
    assert masked.id == "llama-2-7b/prefill/b1/s4096/bf16/masked" and "attention=masked" in masked.workload_ref
    kernels = {a: item_workload(it).kernels for a, it in by_attention.items()}
    rows = {a: k[k["kind"] == "attention"] for a, k in kernels.items()}
    assert set(rows["masked"]["op"]) == {"masked"} and not rows["masked"]["causal"].any()
    assert rows["masked"]["count"].sum() == rows["flash"]["count"].sum() == 32  # a layer each
    for entry, why in (({"model": "gpt2", "attention": "masked"}, "llama-style"),
                       ({"model": "llama-2-7b", "phase": "decode", "attention": "masked"}, "prefill")):
        with pytest.raises(InputError, match=r"models\[0\]\.attention") as err:
            parse_plan({"name": "p", "gpu": "h200", "models": [entry]})
        assert why in str(err.value)


@pytest.mark.parametrize("model, own", [
    ("gpt2", {("elementwise", "scalar_div"): "div", ("elementwise", "where"): "where", ("elementwise", "tanh"): "tanh",
              ("elementwise", "unspecified_scalar"): "pow"}),
    ("bert-large", {("elementwise", "unspecified_scalar"): "div", ("elementwise", "gelu"): "gelu",
                    ("elementwise", "pointwise_add", "mask_add"): "add"}),
    ("opt-1.3b", {("elementwise", "scalar_mul"): "mul", ("elementwise", "relu"): "relu",
                  ("elementwise", "pointwise_add", "mask_add"): "add"})])
def test_the_runners_eager_block_dispatches_the_kernels_the_eager_lowering_lists_a_layer(model, own):
    """A layer of the runner's eager model (counted by the ATen ops it dispatches in bf16 on the CPU: two layers'
    less one's) against a layer of the eager lowering: its GEMMs (GPT-2's QKV packed in one), two batched GEMMs with
    four layout copies, one softmax, two norms, as many elementwise kernels in all, and each family's own ops (GPT-2's
    divide, where and gelu_new's tanh and power; BERT's divide, mask add and GELU; OPT's query scaling, its fp32
    softmax's two casts and ReLU)."""
    a_layer, listed = _a_layer(model, "eager")
    elementwise = ("clone", "div", "where", "tanh", "pow", "mul", "add", "gelu", "relu", "_to_copy")
    assert a_layer["addmm"] == listed[("gemm", "linear")] == (4 if model == "gpt2" else 6)
    assert a_layer["bmm"] == listed[("gemm", "bmm")] == 2 and a_layer["clone"] == listed[("elementwise", "copy")] == 4
    assert a_layer["_softmax"] == listed[("softmax", "softmax")] == 1
    assert a_layer["native_layer_norm"] == listed[("norm", "layernorm")] == 2
    assert sum(a_layer[op] for op in elementwise) == sum(n for (kind, _), n in listed.items() if kind == "elementwise")
    for (kind, *ops), op in own.items():  # an ATen add: the residual's (pointwise_add) and the mask's (mask_add)
        assert a_layer[op] == sum(listed[(kind, name)] for name in ops) > 0, (kind, ops, op)
    if model == "opt":
        assert a_layer["_to_copy"] == listed[("elementwise", "typecast_to_fp32")] + listed[
            ("elementwise", "typecast_to_bf16")] == 2


def test_the_runners_eager_llama_block_replaces_flash_attention_with_the_eager_lowerings_core():
    """Qwen2 (the Llama family), whose norms and rotary embedding the runner runs as transformers does (casts, mean,
    negation and concatenation that the EnergAIzer tracer does not list): a layer's eager run less its flash run
    dispatches what the eager lowering's layer adds over its flash one (repeat_kv's copies of K and V, the query's
    and the output's; two batched GEMMs, the scaling, the mask, the softmax's two casts), with one copy more, the
    merge of heads after SDPA that the lowering lists and PyTorch's flash output, laid out for it, does not need."""
    eager_ran, eager_listed = _a_layer("qwen2-1.5b", "eager")
    flash_ran, flash_listed = _a_layer("qwen2-1.5b", "flash")
    ran, gone = eager_ran - flash_ran, flash_ran - eager_ran
    listed, unlisted = eager_listed - flash_listed, flash_listed - eager_listed
    assert sum(gone.values()) == 1 and sum(unlisted.values()) == 1 == unlisted[("attention", "flash")]
    assert ran["bmm"] == listed[("gemm", "bmm")] == 2 and ran["_softmax"] == listed[("softmax", "softmax")] == 1
    assert ran["clone"] == listed[("elementwise", "copy")] + 1 == 4
    assert ran["_to_copy"] == listed[("elementwise", "typecast_to_fp32")] + listed[("elementwise", "typecast_to_bf16")]
    assert ran["mul"] == listed[("elementwise", "scalar_mul")] == 1
    assert ran["add"] == listed[("elementwise", "mask_add")] == 1  # the mask's: broadcast over the heads


def test_the_masked_plan_runs_the_scores_broadcast_ops_beside_contiguous_ones():
    """h200-masked: the scores' ops with a broadcast operand (the causal where over a (seq, seq) mask, the additive
    mask, the 0-d division), which physics issues unvectorised, beside contiguous ones that it does not (a scaling
    by a Python float), at h200-eager's shapes, in well under a minute."""
    from joulecast.features.kinds import streaming
    plan = load_plan("h200-masked")
    ops = {it.op: [] for it in plan.items}
    for it in plan.items:
        ops[it.op].append(it.sizes)
    assert set(ops) == {"where", "mask_add", "div", "scale", "cast_fp32"} and not any(it.model for it in plan.items)
    assert {"batch": 384, "rows": 1024, "cols": 1024} in ops["where"]  # GPT-2 at batch 32 x 12 heads, 1,024 tokens
    assert {"batch": 256, "rows": 2048, "cols": 2048} in ops["mask_add"]  # OPT-1.3B at 8 x 32 heads, 2,048 tokens
    kernels = {it.op: kernel_workload(it.op, **it.sizes).kernels["op"].item() for it in plan.items}
    assert {kernels[op] for op in ("where", "mask_add", "div")} <= set(streaming.UNVECTORISED_OPS)
    assert kernels["scale"] not in streaming.UNVECTORISED_OPS
    assert sum(e.seconds for e in expected_durations(plan)) < 60


def test_the_eager_plan_runs_issue_31s_shapes_as_hugging_face_does_within_a_device_session():
    """h200-eager (prepared for a lent GPU): GPT-2, BERT-large, OPT-1.3B and Qwen2-1.5B prefill in Hugging Face's
    eager kernels at the H100 test's batches (1-32) and lengths (128-2,048), each item's physics that of the eager
    kernels it runs."""
    plan = load_plan("h200-eager")
    models = [it for it in plan.items if it.model]
    assert {it.model for it in models} == {"gpt2", "bert-large", "opt-1.3b", "qwen2-1.5b"}
    assert {(it.phase, it.attention) for it in models} == {("prefill", "eager")}
    assert {it.batch for it in models} == {1, 8, 32} and {it.seq for it in models} == {128, 512, 1024, 2048}
    # and the eager attention's own kernels alone, at GPT-2's (batch 32 x 12 heads, 1,024 tokens) and OPT-1.3B's
    # (8 x 32 heads, 2,048 tokens) shapes: its products, the scaling over every score, the softmax
    kernels = {it.op: [] for it in plan.items if not it.model}
    for it in plan.items:
        if not it.model:
            kernels[it.op].append(it.sizes)
    assert set(kernels) == {"bmm", "div", "softmax"}
    assert {(s["batch"], s["m"], s["n"], s["k"]) for s in kernels["bmm"]} >= {(384, 1024, 1024, 64),
                                                                            (384, 1024, 64, 1024)}
    assert {s["elements"] for s in kernels["div"]} >= {32 * 12 * 1024 * 1024}
    assert {(s["rows"], s["cols"]) for s in kernels["softmax"]} >= {(32 * 12 * 1024, 1024)}
    durations = expected_durations(plan)
    flash = expected_durations(parse_plan({"name": "f", "gpu": "h200", "models": [
        {"model": "gpt2", "batch": 32, "seq": 1024}]}))[0]
    eager = next(e for e in durations if (e.item.model, e.item.batch, e.item.seq) == ("gpt2", 32, 1024))
    assert eager.physics_time_s > 2 * flash.physics_time_s  # eight GELU kernels and materialised scores
    assert sum(e.seconds for e in durations) < 6 * 60  # inside collect_device.sh's 420 s


def test_the_runner_refuses_a_mixture_of_experts_rather_than_measure_a_dense_layer():
    require_module("torch", "the [collect] extra (torch)", "JOULECAST_REQUIRE_TORCH")
    from joulecast.data.collect.torch_models import Transformer

    with pytest.raises(InputError, match="model: the PyTorch runner builds dense models, not a mixture of experts"):
        Transformer(_tiny("mixtral-8x7b", 1))
    with pytest.raises(InputError, match="model: the PyTorch runner builds dense models, not a mixture of experts"):
        Transformer(_tiny("qwen3-30b-a3b", 1))
    with pytest.raises(InputError, match="model: the PyTorch runner builds no q and k norms \\(qwen3\\)"):
        Transformer(_tiny("qwen3-8b", 1))


@pytest.mark.parametrize("name", sorted(p.stem for p in PLAN_DIR.glob("*.yaml")))
def test_every_shipped_plan_loads_and_fits_a_lent_machines_command_on_either_card(name):
    """Each shipped plan parses (every item lowered), and by physics runs within collect_device.sh's default 420 s on
    the card it names and on the other lent kind (an H100 for an H200 plan, `collect --gpu`)."""
    import dataclasses

    plan = load_plan(name)
    assert plan.name == name and plan.items
    for gpu in dict.fromkeys((plan.gpu, "h100-sxm", "h200")):
        planned = dataclasses.replace(plan, gpu=gpu)
        assert sum(e.seconds for e in expected_durations(planned)) + 2 * plan.settings.idle_s < 420, gpu
