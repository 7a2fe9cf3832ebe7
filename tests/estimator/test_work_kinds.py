"""A GPU's level is trusted only on the kinds of work it was trained on (issue 31): on another kind the estimate is
flagged out-of-domain and says why, reads at physics' point, and its interval reaches as far each way as physics
missed the GPUs trained on that kind (a model saved before those margins: spanning the level's and the pooled
model's)."""

import dataclasses

import numpy as np
import pytest

import joulecast
from joulecast.estimator.loading import load_estimator
from joulecast.estimator import residual
from joulecast.estimator.residual import work_kinds
from joulecast.features import arch
from joulecast.features.design import design_block

HOST = arch.HOST_DISPATCH_S["eager"]  # stated: the intervals below are the model's, without an unknown host's spread


@pytest.fixture(scope="module")
def shipped():
    model = load_estimator(None)
    if model is None:
        pytest.skip("no shipped model in this checkout")
    return model


def test_the_shipped_model_knows_each_gpus_kinds_of_work(shipped):
    assert shipped.gpu_work["h100-sxm"] == ["serving"] and shipped.gpu_work["a10"] == ["forward"]
    assert set(shipped.gpu_work["h200"]) == {"forward", "decode", "training"}


def test_kinds_of_work_come_from_the_phase_and_the_engine():
    spec = joulecast.gpu("h100-sxm")
    works = [joulecast.workload("gpt2", batch=2, seq=64),
             joulecast.workload("gpt2", phase="decode", batch=2, seq=64),
             joulecast.workload("gpt2", phase="decode", batch=2, seq=64, launch_mode="graph", engine="vllm-0.5.4"),
             joulecast.workload("gpt2", phase="training", batch=2, seq=64),
             joulecast.workload("resnet-101", phase="inference", batch=2)]
    X, _, _ = design_block(works, spec, None, None)
    assert work_kinds(X.to_numpy(np.float32), X.columns) == ["forward", "decode", "serving", "training", "forward"]


def test_a_mixture_of_experts_pass_is_work_of_its_own_kind_read_at_physics_and_widened(shipped):
    """No measured row runs a mixture of experts' grouped GEMMs: Mixtral's pass is its kind's MoE work, outside
    every GPU's learned kinds (the H100's serving ones too), read at physics' point with the pooled physics margin
    of its kind widened (UNLEARNED_WIDEN), as an architecture not trained on is."""
    spec = joulecast.gpu("h100-sxm")
    works = [joulecast.workload("mixtral-8x7b", batch=2, seq=64),
             joulecast.workload("mixtral-8x7b", phase="decode", batch=64, seq=512, launch_mode="graph",
                                engine="vllm-0.5.4"),
             joulecast.workload("mistral-7b", phase="decode", batch=64, seq=512, launch_mode="graph",
                                engine="vllm-0.5.4")]
    X, _, _ = design_block(works, spec, None, None)
    share = X.frame()["expert_share"].tolist()
    assert share[2] == 0 and min(share[:2]) > 0.1
    assert work_kinds(X.to_numpy(np.float32), X.columns) == [
        "forward" + residual.MOE_WORK, "serving" + residual.MOE_WORK, "serving"]
    assert "expert_share" not in shipped.features  # it marks a kind; no tree reads it
    served = works[1]
    est = joulecast.estimate(served, "h100-sxm", estimator=shipped)
    physics = joulecast.estimate(served, "h100-sxm", estimator="physics")
    assert not est.in_domain and est.energy_j == pytest.approx(physics.energy_j, rel=1e-12)
    assert any("serving, mixture of experts work on h100-sxm, trained on serving only" in r and "widened" in r
               for r in est.outside_domain)
    # no GPU measured the kind: the pooled margin (its kind has none of its own), widened, about physics' point;
    # the default host's spread moves the bounds further out, not in
    margin = shipped.physics_new_gpu["energy"] * residual.UNLEARNED_WIDEN
    lo, hi = est.energy_interval_j
    assert np.log(hi / est.energy_j) >= margin * (1 - 1e-6) and np.log(est.energy_j / lo) >= margin * (1 - 1e-6)
    # on a GPU never trained on (spec-only), the reason names the kind too
    unseen = joulecast.estimate(served, "a100-sxm4-80gb", estimator=shipped)
    assert "spec-only" in unseen.flags and any(
        r == "serving, mixture of experts work, which no GPU trained on ran (physics' point, widened)"
        for r in unseen.outside_domain)
    dense = joulecast.estimate(works[2], "h100-sxm", estimator=shipped)
    assert not any("mixture" in r for r in dense.outside_domain)  # the dense step keeps its kind


def test_a_kind_fewer_than_two_gpus_ran_takes_another_kinds_margin_widened(shipped):
    """Decode and training steps: the H200's rows alone, so no margin of their own (`kind_measured`); on another GPU
    they read at physics' point with the widest margin measured on other kinds, widened as work unlearned
    (UNLEARNED_WIDEN), and say so; a forward pass there keeps its own kind's margin, unwidened; a model saved without
    per-kind margins widens nothing for it."""
    assert shipped.kind_measured(np.array(["forward", "serving", "decode", "training"])).tolist() == [
        True, True, False, False]
    widest = max(shipped.physics_new_gpu_by_kind["energy"].values())
    for phase, kind in (("decode", "decode"), ("training", "training")):
        step = joulecast.workload("llama-3-8b", phase=phase, batch=8, seq=512, host_dispatch_s=HOST)
        est = joulecast.estimate(step, "a40", estimator=shipped)
        physics = joulecast.estimate(step, "a40", estimator="physics")
        assert est.energy_j == pytest.approx(physics.energy_j, rel=1e-12) and "spec-only" in est.flags
        assert f"{kind} work, which fewer than two GPUs trained on ran: physics' margin of other work, widened" in \
            est.outside_domain
        lo, hi = est.energy_interval_j
        assert np.log(hi / est.energy_j) == pytest.approx(widest * residual.UNLEARNED_WIDEN, rel=1e-6)
        assert np.log(est.energy_j / lo) == pytest.approx(widest * residual.UNLEARNED_WIDEN, rel=1e-6)
        # on the H100, trained on serving alone, the note on its kind says widened
        other = joulecast.estimate(step, "h100-sxm", estimator=shipped)
        assert any(f"{kind} work on h100-sxm, trained on serving only" in r and r.endswith("widened)")
                   for r in other.outside_domain), other.outside_domain
    prefill = joulecast.estimate(joulecast.workload("llama-3-8b", batch=8, seq=512, host_dispatch_s=HOST), "a40",
                                 estimator=shipped)
    margin = shipped.physics_new_gpu_by_arch["energy"]["8.0"]["forward"]
    assert np.log(prefill.energy_j / prefill.energy_interval_j[0]) == pytest.approx(margin, rel=1e-6)  # (the upper
    # held under the power limit)
    assert not any("fewer than two" in r for r in prefill.outside_domain)
    older = dataclasses.replace(shipped, physics_new_gpu_by_kind={}, physics_new_gpu_by_arch={}, trees=shipped.trees)
    assert older.kind_measured(np.array(["decode"])) is True


def test_prefill_on_a_gpu_trained_only_on_serving_reads_at_physics_and_spans_the_learned_intervals(shipped):
    prefill = joulecast.workload("llama-3-8b", batch=8, seq=1024, host_dispatch_s=HOST)  # no host's spread
    est = joulecast.estimate(prefill, "h100-sxm", estimator=shipped)
    assert not est.in_domain and "out-of-domain" in est.flags
    assert any("forward work on h100-sxm, trained on serving only (physics' point" in r for r in est.outside_domain)
    # the point is physics': the H100's level was learned on vLLM's steps, whose engine it carries
    physics = joulecast.estimate(prefill, "h100-sxm", estimator="physics")
    assert est.energy_j == pytest.approx(physics.energy_j, rel=1e-12)
    assert est.time_s == pytest.approx(physics.time_s, rel=1e-12)
    # as far each way as physics missed the GPUs of its architecture (Hopper: the H200) trained on forward passes,
    # more than the margin pooled over every GPU's (widened where a feature is out of range)
    margin = shipped.physics_new_gpu_by_arch["energy"]["9.0"]["forward"]
    assert margin > shipped.physics_new_gpu_by_kind["energy"]["forward"]
    widen = residual.UNLEARNED_WIDEN if any(" = " in r for r in est.outside_domain) else 1.0
    lo, hi = est.energy_interval_j
    assert np.log(hi / est.energy_j) == pytest.approx(margin * widen, rel=1e-6)
    assert np.log(est.energy_j / lo) == pytest.approx(margin * widen, rel=1e-6)
    # a model saved before those margins: the level's interval (what the model said before it knew the kinds) and the
    # pooled model's, each moved to physics' point
    shipped = dataclasses.replace(shipped, physics_new_gpu={}, physics_new_gpu_by_kind={}, physics_new_gpu_by_arch={},
                                  trees=shipped.trees)
    est = joulecast.estimate(prefill, "h100-sxm", estimator=shipped)
    trusting = dataclasses.replace(shipped, gpu_work={})
    trusting.trees = shipped.trees
    before = joulecast.estimate(prefill, "h100-sxm", estimator=trusting)
    assert before.energy_j != pytest.approx(physics.energy_j, rel=1e-3)
    unseen = dataclasses.replace(shipped, gpus=[g for g in shipped.gpus if g != "h100-sxm"], arch_codes=[])
    unseen.trees = shipped.trees
    pooled = joulecast.estimate(prefill, "h100-sxm", estimator=unseen)  # a model that never saw the H100, pooled
    lo, hi = est.energy_interval_j
    for other in (before, pooled):
        shift = est.energy_j / other.energy_j
        assert lo <= other.energy_interval_j[0] * shift * (1 + 1e-9)
        assert hi >= other.energy_interval_j[1] * shift * (1 - 1e-9)
    assert lo <= before.energy_interval_j[0] * (1 + 1e-9) and hi >= before.energy_interval_j[1] * (1 - 1e-9)
    assert lo < est.energy_j < hi


def test_a_gpu_not_trained_on_reads_at_physics_with_the_pooled_interval_moved_there(shipped):
    """A GPU the model has no rows of (of an architecture it has): physics' point, as far each way as physics missed
    the GPUs of its architecture (Ampere: the A10 and A100-PCIe) trained on forward passes; with a model saved before
    those margins, the pooled bags' interval (what a model saved before that gave) moved to that point is within its
    interval. Eager attention, as every Ampere pass trained on ran it (`test_a_pass_whose_kernel_mix_...`)."""
    prefill = joulecast.workload("gpt2", batch=8, seq=512, attention="eager", host_dispatch_s=HOST)
    est = joulecast.estimate(prefill, "a100-sxm4-80gb", estimator=shipped)
    assert "spec-only" in est.flags and not any(" = " in r for r in est.outside_domain)
    physics = joulecast.estimate(prefill, "a100-sxm4-80gb", estimator="physics")
    assert est.energy_j == pytest.approx(physics.energy_j, rel=1e-12)
    margin = shipped.physics_new_gpu_by_arch["energy"]["8.0"]["forward"]
    assert np.log(np.array(est.energy_interval_j) / est.energy_j) == pytest.approx([-margin, margin], rel=1e-6)
    shipped = dataclasses.replace(shipped, physics_new_gpu={}, physics_new_gpu_by_kind={}, physics_new_gpu_by_arch={},
                                  trees=shipped.trees)
    est = joulecast.estimate(prefill, "a100-sxm4-80gb", estimator=shipped)
    old_rule = dataclasses.replace(shipped, arch_codes=[])  # a model saved before that: the pooled bags' point
    old_rule.trees = shipped.trees
    pooled = joulecast.estimate(prefill, "a100-sxm4-80gb", estimator=old_rule)
    assert pooled.energy_j != pytest.approx(est.energy_j, rel=1e-6)
    # a model saved before widened every row on a new GPU; work without an engine on a GPU of an architecture trained
    # on is no longer widened, so its interval spans the pooled bags' unwidened one moved to physics' point
    lo, hi = est.energy_interval_j
    shift, widen = est.energy_j / pooled.energy_j, residual.OUT_OF_DOMAIN_WIDEN
    (p_lo, p_hi), p_point = pooled.energy_interval_j, pooled.energy_j
    assert lo <= p_point * (p_lo / p_point) ** (1 / widen) * shift * (1 + 1e-9)
    assert hi >= p_point * (p_hi / p_point) ** (1 / widen) * shift * (1 - 1e-9)


def test_a_kind_the_gpu_was_trained_on_keeps_its_level(shipped):
    served = joulecast.workload("llama-3-8b", phase="decode", batch=64, seq=512, launch_mode="graph",
                                engine="vllm-0.5.4")
    trusting = dataclasses.replace(shipped, gpu_work={})
    trusting.trees = shipped.trees
    now, before = (joulecast.estimate(served, "h100-sxm", estimator=m) for m in (shipped, trusting))
    assert now.energy_j == before.energy_j and now.energy_interval_j == before.energy_interval_j
    assert not any("trained on" in r and "only" in r for r in now.outside_domain)


def test_one_row_of_another_kind_reads_both_sets_of_trees_at_once_with_the_same_bits(shipped, monkeypatch):
    """One estimate of a kind its GPU was not trained on needs the level's bags and the pooled ones: read together
    (the two tree arrays joined) they give every correction and bound that two reads give, bit for bit, and a
    batch's row the same."""
    from joulecast.estimator import residual

    works = [joulecast.workload("llama-3-8b", batch=8, seq=1024), joulecast.workload("gpt2", batch=4, seq=256)]
    X, _, _ = design_block(works, joulecast.gpu("h100-sxm"), None, None)
    one = X.take(np.array([0]))
    joined = shipped.predict(one, ["h100-sxm"])
    batch = shipped.predict(X, ["h100-sxm"] * 2)
    monkeypatch.setattr(residual, "_joined", lambda own, pooled: None)
    apart = shipped.predict(one, ["h100-sxm"])
    assert not joined["in_domain"][0]
    for key in ("time", "energy", "time_lo", "time_hi", "energy_lo", "energy_hi"):
        np.testing.assert_array_equal(joined[key], apart[key], err_msg=key)
        np.testing.assert_array_equal(joined[key], batch[key][:1], err_msg=key)


def test_reasons_read_from_the_predictions_checks_are_outside_domains(shipped):
    """`predict_explained` gives `predict`'s corrections and, from the checks the prediction made, the reasons
    `outside_domain` gives each row: a kind of work its GPU has no rows of, a feature out of range, a GPU of an
    architecture not trained on, and none for a row in the domain."""
    rows = [("llama-3-8b", "prefill", 8, 1024, "h100-sxm"), ("llama-3-70b", "training", 4, 4096, "h200"),
            ("gpt2", "prefill", 8, 512, "l40s"), ("llama-3-8b", "decode", 16, 1024, "h200")]
    blocks = [design_block([joulecast.workload(m, phase=p, batch=b, seq=s)], joulecast.gpu(g), None, None)[0]
              for m, p, b, s, g in rows]
    X = dataclasses.replace(blocks[0], values=np.concatenate([b.values for b in blocks]))
    gpus = [r[-1] for r in rows]
    corrections, reasons = shipped.predict_explained(X, gpus)
    assert reasons == shipped.outside_domain(X, gpus)
    alone = shipped.predict(X, gpus)
    for key, values in alone.items():
        np.testing.assert_array_equal(corrections[key], values, err_msg=key)
    assert "forward work on h100-sxm" in reasons[0][0] and reasons[1][0].startswith("log_flops = ")
    assert any("architecture" in r for r in reasons[2])
    assert corrections["in_domain"][3] and reasons[3] == ()


def test_a_power_limit_bounds_the_domain_through_the_clock_it_leaves_the_kernels(shipped):
    """A lowered power limit is judged by the SM clock physics' cap solve settles at (weighted by busy time, over the
    boost clock) against the clocks trained on, not by its ratio to the default limit, which the training rows hold
    at 1: 140 W on the A100-PCIe leaves its kernels near 675 MHz, within the trained 510-1,410, and is in the domain
    with an interval as wide as the default limit's (its band's own width, not widened twofold); 90 W drives them
    below 510 MHz and is flagged, the reason naming the ratio, and widened. (120 W left them near 635 MHz while a
    lowered limit scaled the static term down; a capped kernel now draws what its clock locked would: 479 MHz.)"""
    spec = joulecast.gpu("a100-pcie-40gb")
    prefill = joulecast.workload("llama-3-8b", batch=8, seq=1024, host_dispatch_s=HOST)
    default = joulecast.estimate(prefill, spec.name, estimator=shipped)
    capped, starved = (joulecast.estimate(prefill, spec.name, power_limit_w=w, estimator=shipped) for w in (140, 90))
    ratio = [e.power_limited["busy_clock_mhz"] / spec.boost_clock_mhz for e in (capped, starved)]
    low = shipped.domain["busy_clock_ratio"][0]
    assert ratio[1] < low < ratio[0] < 1 and low == pytest.approx(510 / 1410, rel=1e-6)
    assert capped.in_domain and capped.outside_domain == () and "out-of-domain" not in capped.flags

    def width(e):
        return np.log(e.energy_interval_j[1] / e.energy_interval_j[0])
    assert 0.5 < width(capped) / width(default) < 1.5  # not widened
    assert not starved.in_domain and "out-of-domain" in starved.flags
    (reason,) = starved.outside_domain
    assert reason.startswith(f"busy_clock_ratio = {ratio[1]:.3g} (trained ")
    assert width(starved) > 1.5 * width(capped)
    # the design column is that ratio, and no model input: the trees are the ones trained without it
    X = design_block([prefill], spec, None, 90)[0]
    assert X.values[0, X.columns.index("busy_clock_ratio")] == pytest.approx(ratio[1], rel=1e-9)
    assert "busy_clock_ratio" not in shipped.features and "power_limit_ratio" not in shipped.domain


def test_a_pass_whose_kernel_mix_its_architecture_never_ran_is_widened(shipped):
    """Issue 31: an architecture's physics margin speaks for the kernel mixes its GPUs' passes ran. Every Ampere pass
    trained on ran eager attention, so a fused pass on a new Ampere card reads physics' margin widened by
    UNLEARNED_WIDEN and says which share lies outside, and an eager one keeps it. Hopper's passes (the H200's) ran
    both since h200-eager, so on the H100 (trained on serving only) both keep the margin; none ran a convolution, so a
    ResNet's does not."""
    def run(gpu: str, model: str = "gpt2", **kw):
        work = joulecast.workload(model, batch=32, host_dispatch_s=HOST, **kw)
        est = joulecast.estimate(work, gpu, estimator=shipped)
        return est, float(np.log(est.energy_j / est.energy_interval_j[0]))  # below (above, a power cap may bound)

    for gpu, arch, familiar, foreign, share in (
            ("a100-sxm4-80gb", "8.0", [dict(seq=1024, attention="eager")], dict(seq=1024, attention="flash"),
             "share_attention"),
            ("h100-sxm", "9.0", [dict(seq=1024, attention="eager"), dict(seq=1024, attention="flash")],
             dict(model="resnet-101"), "share_conv2d")):
        margin = shipped.physics_new_gpu_by_arch["energy"][arch]["forward"]
        assert shipped.physics_arch_mix[arch]["forward"][share] == [0.0, 0.0]
        est, reach = run(gpu, **foreign)
        assert reach == pytest.approx(margin * residual.UNLEARNED_WIDEN, rel=1e-6)
        assert any(r.startswith(f"{share} = ") and f"architecture {arch}'s forward passes trained 0 to 0" in r
                   for r in est.outside_domain)
        for kw in familiar:
            est, reach = run(gpu, **kw)
            assert not any("passes trained" in r for r in est.outside_domain), kw
            assert reach == pytest.approx(margin, rel=1e-6), kw
    # a model saved before the check (no ranges recorded) keeps the margin on both
    older = dataclasses.replace(shipped, physics_arch_mix={})
    older.trees = shipped.trees
    work = joulecast.workload("gpt2", batch=32, seq=1024, attention="flash", host_dispatch_s=HOST)
    est = joulecast.estimate(work, "a100-sxm4-80gb", estimator=older)
    assert not any("passes trained" in r for r in est.outside_domain)
    assert np.log(est.energy_j / est.energy_interval_j[0]) == pytest.approx(
        shipped.physics_new_gpu_by_arch["energy"]["8.0"]["forward"], rel=1e-6)


def test_a_traced_kernel_list_is_a_pass_the_mix_check_reads(shipped, energaizer):
    """A kernel list without a phase (EnergAIzer's traces, as its H100 prefill rows name them) is a pass of many
    launches: on the H100 a traced ResNet's convolution share lies outside Hopper's forward passes, so its margin is
    widened; a traced OPT-1.3B's eager mix lies inside (the H200's eager passes ran it), so its margin is not."""
    margin = shipped.physics_new_gpu_by_arch["energy"]["9.0"]["forward"]
    for name, widen, share in (("resnet101__pbf16_b32_freq900.json", residual.UNLEARNED_WIDEN, "share_conv2d"),
                               ("optmodel_opt-1p3b_pbf16_b8_s2048_modeprefill.json", 1.0, None)):
        work = joulecast.workload_from_kernels(energaizer / "workloads" / "all" / name)
        est = joulecast.estimate(work, "h100-sxm", sm_clock_mhz=1830, estimator=shipped)
        # (the unstated host's spread may reach further still: a ResNet's many launches, much further)
        reach = np.log(est.energy_j / est.energy_interval_j[0])
        assert margin * widen * (1 - 1e-9) <= reach < margin * widen * (1.5 if share else 1.01), name
        assert any(r.startswith(f"{share} = ") for r in est.outside_domain) if share else \
            not any("passes trained" in r for r in est.outside_domain)
