"""The collection loop on the CPU: replayed meter traces on a simulated clock, and the real PyTorch runners."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from conftest import require_module

from joulecast.data.collect.collector import collect
from joulecast.data.collect.meters import ReplayMeter, Sample
from joulecast.data.collect.plan import parse_plan
from joulecast.data.store import load_store, read_card, write_card

FAST = {"min_window_s": 0.05, "min_iterations": 5, "repeats": 3, "warmup_s": 0.01, "idle_s": 0.5}


class Clock:
    """Simulated seconds: the fake steps and idle sleeps advance it, the replay meter reads it."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds


class FakeStep:
    def __init__(self, clock, seconds):
        self.clock, self.seconds = clock, seconds

    def run(self, n):
        self.clock.t += n * self.seconds
        return n * self.seconds

    def close(self):
        pass


class FakeRunner:
    """Each item takes 2 ms per iteration; `explode` maps item ids to the exception their preparation raises."""

    def __init__(self, clock, explode=None):
        self.clock, self.explode, self.prepared = clock, explode or {}, []

    def describe(self):
        return {"torch": "fake"}

    def prepare(self, item):
        self.prepared.append(item.id)
        if item.id in self.explode:
            raise self.explode[item.id]
        return FakeStep(self.clock, 0.002)


def trace(power_w=250.0, seconds=200.0, step=0.001, counter=True, throttle_after=None, clock_wobble=False):
    t = np.arange(0.0, seconds, step)
    return [Sample(time_s=float(x), energy_j=float(power_w * x) if counter else float("nan"), power_w=power_w,
                   sm_clock_mhz=max(1000.0, 1980.0 - 1000.0 * x) if clock_wobble else 1980.0, memory_clock_mhz=3201.0,
                   temperature_c=45.0, power_limit_w=700.0,
                   throttle=frozenset({"sw_power_cap"}) if throttle_after is not None and x >= throttle_after
                   else frozenset())
            for i, x in enumerate(t)]


def plan(settings=FAST, elements=(1024, 2048, 4096)):
    return parse_plan({"name": "test", "gpu": "h200", "settings": settings,
                       "kernels": [{"op": "add", "grid": {"elements": list(elements)}}]})


def test_rows_from_an_energy_counter(tmp_path):
    clock = Clock()
    result = collect(plan(), tmp_path, ReplayMeter(trace(), clock), FakeRunner(clock), progress=False,
                     sleep=clock.sleep, clock=clock)
    assert (result.written, result.failed, result.interrupted) == (3, {}, False)
    rows = load_store(tmp_path)
    assert len(rows) == 3 and set(rows["source"]) == {"joulecast-collector"}
    row = rows.iloc[0]
    # 250 W for 2 ms per iteration: 0.5 J; a 0.05 s window needs 25 iterations.
    assert row.time_s == pytest.approx(0.002) and row.energy_j == pytest.approx(0.5, rel=0.02)
    assert row.power_w == pytest.approx(250.0, rel=0.02) and row.idle_power_w == pytest.approx(250.0, rel=0.02)
    assert row.iterations == math.ceil(0.05 / 0.002) and row.repeats == 3 and row.method == "energy_counter"
    assert not (row.flag_throttled or row.flag_clock_moved or row.flag_window_short)
    assert row.workload_ref.startswith("kernel:add?elements=") and row.kernel_list == "lowered"
    assert row.spread_rel < 0.05 and row.sm_clock_mhz == 1980.0 and row.power_limit_w == 700.0
    card = read_card(tmp_path / "h200" / "test" / "CARD.yaml")
    assert card["sessions"][-1]["status"] == "complete" and card["sessions"][-1]["written"] == 3
    assert card["sessions"][-1]["idle_before_w"] == pytest.approx(250.0, rel=0.02)


def test_power_samples_where_there_is_no_counter(tmp_path):
    clock = Clock()
    collect(plan(), tmp_path, ReplayMeter(trace(counter=False), clock), FakeRunner(clock), progress=False,
            sleep=clock.sleep, clock=clock)
    rows = load_store(tmp_path)
    assert set(rows["method"]) == {"power_samples"}
    assert rows["energy_j"].to_numpy() == pytest.approx(0.5, rel=0.02)


def test_throttle_and_clock_flags(tmp_path):
    clock = Clock()
    # Idle 0.5 s, then each item takes about 0.02 + 3 x 0.05 s: the power cap engages during the third item.
    collect(plan(), tmp_path, ReplayMeter(trace(throttle_after=0.9), clock), FakeRunner(clock), progress=False,
            sleep=clock.sleep, clock=clock)
    rows = load_store(tmp_path).set_index("measurement_id")
    assert rows["flag_throttled"].tolist() == [False, False, True]
    other = tmp_path / "wobble"
    clock = Clock()
    collect(plan(), other, ReplayMeter(trace(clock_wobble=True), clock), FakeRunner(clock), progress=False,
            sleep=clock.sleep, clock=clock)
    wobbly = load_store(other)
    # The clock falls 1,000 MHz per second: 50 MHz inside each 0.05 s window, more than one 15 MHz step.
    assert wobbly["flag_clock_moved"].all() and (wobbly["sm_clock_max_mhz"] - wobbly["sm_clock_min_mhz"] >= 50).all()


def test_interrupted_collection_resumes_without_loss_or_duplicates(tmp_path):
    p = plan()
    clock = Clock()
    ids = [it.id for it in p.items]
    runner = FakeRunner(clock, explode={ids[2]: KeyboardInterrupt()})
    first = collect(p, tmp_path, ReplayMeter(trace(), clock), runner, progress=False, sleep=clock.sleep, clock=clock)
    assert first.interrupted and first.written == 2
    card = read_card(tmp_path / "h200" / "test" / "CARD.yaml")
    assert card["sessions"][-1]["status"] == "interrupted"
    clock2 = Clock()
    runner2 = FakeRunner(clock2)
    second = collect(p, tmp_path, ReplayMeter(trace(), clock2), runner2, progress=False, sleep=clock2.sleep,
                     clock=clock2)
    assert (second.skipped, second.written, runner2.prepared) == (2, 1, [ids[2]])
    rows = load_store(tmp_path)
    assert sorted(rows["measurement_id"]) == sorted(ids)
    assert len(read_card(tmp_path / "h200" / "test" / "CARD.yaml")["sessions"]) == 2
    # what people add to the card between sessions (observations, the host's dispatch) survives a resume
    path = tmp_path / "h200" / "test" / "CARD.yaml"
    write_card(tmp_path, "h200", "test", {**read_card(path), "host_dispatch_s": 1.8e-5, "observations": {"a": 1}})
    clock3 = Clock()
    collect(p, tmp_path, ReplayMeter(trace(), clock3), FakeRunner(clock3), progress=False, sleep=clock3.sleep,
            clock=clock3)
    card = read_card(path)
    assert (card["host_dispatch_s"], card["observations"], len(card["sessions"])) == (1.8e-5, {"a": 1}, 3)
    assert card["sessions"][-1]["status"] == "complete"  # nothing left to measure: ended, not left running
    assert (load_store(tmp_path)["host_dispatch_s"] == 1.8e-5).all()


def test_a_failing_item_is_recorded_and_the_rest_measured(tmp_path):
    p = plan()
    clock = Clock()
    bad = p.items[1].id
    result = collect(p, tmp_path, ReplayMeter(trace(), clock),
                     FakeRunner(clock, explode={bad: RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")}),
                     progress=False, sleep=clock.sleep, clock=clock)
    assert result.written == 2 and result.failed == {bad: "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"}
    assert bad not in set(load_store(tmp_path)["measurement_id"])


TINY = {"num_hidden_layers": 1, "n_layer": 1, "hidden_size": 64, "n_embd": 64, "intermediate_size": 128,
        "ffn_dim": 128, "num_attention_heads": 4, "n_head": 4, "num_key_value_heads": 2, "vocab_size": 128,
        "word_embed_proj_dim": 64}


def test_torch_runners_on_the_cpu(tmp_path):
    """Every kernel op a plan may name, and every model family, phase and attention the shipped plans measure, runs
    for real on torch's CPU device through the whole loop: a lent GPU's few minutes meet no runner untried."""
    import time

    torch_runner = require_module("joulecast.data.collect.torch_runner", "the [collect] extra (torch)",
                                  "JOULECAST_REQUIRE_TORCH")
    p = parse_plan({"name": "cpu", "gpu": "h200", "settings": {**FAST, "min_window_s": 0.02, "idle_s": 0.02},
                    "kernels": [
                        {"op": "gemm", "grid": {"m": [32], "n": [16], "k": [24]}},
                        {"op": "gemm", "dtype": "fp8", "shapes": [{"m": 16, "n": 16, "k": 16}]},
                        {"op": "bmm", "shapes": [{"batch": 3, "m": 8, "n": 8, "k": 4}]},
                        {"op": "attention", "fixed": {"heads": 4, "kv_heads": 2, "head_dim": 16},
                         "shapes": [{"batch": 2, "seq_q": 8, "seq_kv": 8}, {"batch": 2, "seq_q": 1, "seq_kv": 8}]},
                        *({"op": op, "shapes": [{"rows": 4, "cols": 32}]} for op in ("rmsnorm", "layernorm", "softmax")),
                        *({"op": op, "shapes": [{"elements": 256}]}
                          for op in ("add", "mul", "div", "gelu", "silu", "scale", "cast_fp32")),
                        *({"op": op, "shapes": [{"batch": 2, "rows": 8, "cols": 8}]} for op in ("where", "mask_add"))],
                    "models": [{"model": ["gpt2", "llama-3-8b", "opt-1.3b"], "phase": ["prefill", "decode", "training"],
                                "batch": 2, "seq": 8, "overrides": TINY},
                               {"model": "bert-large", "phase": ["prefill", "training"], "batch": 2, "seq": 8,
                                "overrides": TINY},
                               # the other families the shipped plans measure
                               {"model": ["qwen2-1.5b", "mistral-7b"], "phase": ["prefill", "decode"], "batch": 2,
                                "seq": 8, "overrides": TINY},
                               {"model": ["gpt2", "bert-large", "opt-1.3b", "llama-3-8b", "qwen2-1.5b", "mistral-7b"],
                                "batch": 2, "seq": 8, "overrides": TINY, "attention": "eager"},
                               {"model": "llama-3-8b", "batch": 2, "seq": 8, "overrides": TINY, "attention": "masked"}],
                    "waits": [{"mode": ["spin", "idle-context"], "us": 100}]})
    from joulecast.data.collect.plan import PLAN_DIR, load_plan
    from joulecast.features.kinds import PLAN_OPS
    from joulecast.features.lowering import resolve_model

    assert {item.op for item in p.items if item.kind == "kernel"} == set(PLAN_OPS)  # every op a plan may name
    # every model family and attention a shipped plan measures, so a lent GPU's run meets no runner untried here
    shipped = [item for plan in PLAN_DIR.glob("*.yaml") for item in load_plan(plan.stem).items if item.kind == "model"]
    family = {m: resolve_model(m)[0]["model_type"] for m in {item.model for item in [*shipped, *p.items]
                                                             if item.kind == "model"}}
    tried = {(family[item.model], item.attention) for item in p.items if item.kind == "model"}
    assert {(family[item.model], item.attention) for item in shipped} <= tried
    t0 = time.monotonic()
    meter = ReplayMeter(trace(seconds=120.0, step=0.001), clock=lambda: time.monotonic() - t0)
    result = collect(p, tmp_path, meter, torch_runner.TorchRunner("cpu"), progress=False)
    fp8 = "gemm/m16/n16/k16/fp8"
    assert set(result.failed) == {fp8} and "compute capability 8.9" in result.failed[fp8]
    rows = load_store(tmp_path)
    assert len(rows) == len(p.items) - 1 == 40
    device = read_card(tmp_path / "h200" / "cpu" / "CARD.yaml")["device"]
    assert device["host_cpu"].endswith("logical cores") and device["device"] == "cpu"  # the host, for host-bound rows
    eager = rows[rows["measurement_id"].str.contains("/eager")]
    assert len(eager) == 6 and set(eager["attention"]) == {"eager"}  # Hugging Face's eager attention ran and says so
    masked = rows[rows["measurement_id"].str.contains("/masked")]
    assert len(masked) == 1 and masked["attention"].iloc[0] == "masked"
    assert (rows["time_s"] > 0).all() and (rows["iterations"] >= 5).all()
    waits = rows[rows["phase"] == "wait"].set_index("measurement_id")
    assert set(waits.index) == {"wait/spin/us100", "wait/idle-context/us100"}
    assert waits["time_s"].between(90e-6, 5e-3).all()  # a launch lasts about its 100 us
    assert waits["workload_ref"].isna().all() and set(waits["kernel_list"]) == {"none"}
    assert set(rows.loc[rows["model_family"] == "llama", "phase"]) == {"prefill", "decode", "training"}
    assert rows["peak_memory_gb"].isna().all()  # the CPU's allocator keeps no peak: nothing is made up


class PeakStep(FakeStep):
    """A step whose device counts the memory its work held at its peak, as a GPU's allocator does."""

    def __init__(self, clock, seconds, peak_gb):
        super().__init__(clock, seconds)
        self.peak_gb = peak_gb

    def peak_memory_gb(self):
        return self.peak_gb


def test_a_rows_peak_device_memory_is_kept_where_its_step_counts_it(tmp_path):
    """Each row keeps the GiB its work held at its peak where the runner counts it (a GPU's `max_memory_allocated`,
    reset before the item was built), to check an estimate's memory against; a step that counts none, and a
    collection stored before the column, read as missing."""
    clock = Clock()

    class Runner(FakeRunner):
        def prepare(self, item):
            self.prepared.append(item.id)
            return PeakStep(self.clock, 0.002, 1.5 * len(self.prepared))

    collect(plan(), tmp_path, ReplayMeter(trace(), clock), Runner(clock), progress=False, sleep=clock.sleep,
            clock=clock)
    rows = load_store(tmp_path).sort_values("measurement_id")
    assert sorted(rows["peak_memory_gb"]) == [1.5, 3.0, 4.5]
    collect(plan(elements=(8192,)), tmp_path / "other", ReplayMeter(trace(), clock), FakeRunner(clock),
            progress=False, sleep=clock.sleep, clock=clock)
    assert load_store(tmp_path / "other")["peak_memory_gb"].isna().all()
    parts = list((tmp_path / "h200" / "test").glob("part-*.parquet"))
    assert parts
    for part in parts:  # as a collection written before the column was
        pd.read_parquet(part).drop(columns="peak_memory_gb").to_parquet(part)
    assert load_store(tmp_path)["peak_memory_gb"].isna().all()


class HiccupStep(FakeStep):
    """Warm-up runs are slowed by a hiccup (a collection, a clock ramp): they look 100 times slower than the rest."""

    def __init__(self, clock, seconds):
        super().__init__(clock, seconds)
        self.runs = 0

    def run(self, n):
        self.runs += 1
        return super().run(n * (100 if self.runs <= 2 else 1))


def test_short_windows_are_measured_again_with_more_iterations():
    from joulecast.data.collect.collector import measure_item
    from joulecast.data.collect.plan import Settings

    clock = Clock()
    settings = Settings(**{**FAST, "warmup_s": 0.0})
    fields = measure_item(HiccupStep(clock, 0.002), ReplayMeter(trace(), clock), settings, idle_power_w=50.0)
    # The warm-up saw 0.2 s per iteration, so 5 iterations (10 ms) per window; measured again at 25 (0.05 s).
    assert fields["iterations"] == 25 and not fields["flag_window_short"]
    assert fields["time_s"] == pytest.approx(0.002) and fields["energy_j"] == pytest.approx(0.5, rel=0.05)


def test_a_window_the_meter_saw_no_energy_in_is_measured_longer_and_else_the_item_fails_not_the_flush(tmp_path):
    """An energy counter that moves every 0.2 s leaves 0.05 s windows with no energy: they are measured again, twice
    as long each time, until they see some; one that never moves fails its items, one line each, and the flush (and
    every row already collected) is not lost to a row the store would refuse."""
    from joulecast.data.collect.collector import measure_item
    from joulecast.data.collect.plan import Settings

    clock = Clock()
    settings = Settings(**{**FAST, "warmup_s": 0.0})
    fields = measure_item(FakeStep(clock, 0.002), ReplayMeter(trace(step=0.2), clock), settings, idle_power_w=50.0)
    assert fields["iterations"] in (50, 100) and fields["energy_j"] > 0  # 25 a window at first: 0.05 s
    clock = Clock()
    result = collect(plan(), tmp_path, ReplayMeter(trace(step=100.0, seconds=200.0), clock), FakeRunner(clock),
                     progress=False, sleep=clock.sleep, clock=clock)
    assert len(result.failed) == 3 and all("the meter saw no energy" in r for r in result.failed.values())


def test_every_reading_of_the_windows_is_kept_beside_the_rows(tmp_path):
    from joulecast.data.store import load_samples

    clock = Clock()
    p = plan()
    collect(p, tmp_path, ReplayMeter(trace(power_w=300.0, step=0.01), clock), FakeRunner(clock), progress=False,
            sleep=clock.sleep, clock=clock)
    samples, rows = load_samples(tmp_path, "h200", "test"), load_store(tmp_path)
    idle = samples["measurement_id"].str.startswith(("idle-before/", "idle-after/"))
    assert samples.loc[idle, "measurement_id"].nunique() == 2
    measured = samples[~idle]
    assert set(measured["measurement_id"]) == set(rows["measurement_id"])
    assert set(measured["window"]) == {0, 1, 2}  # the three repeats of each row
    # The readings give back each row's energy: the counter's rise over a window, per iteration.
    for _, row in rows.iterrows():
        window = measured[measured["measurement_id"] == row["measurement_id"]]
        per_window = window.groupby("window")["energy_j"].agg(lambda e: e.max() - e.min()) / row["iterations"]
        assert math.isclose(per_window.median(), row["energy_j"], rel_tol=1e-9)


def test_rows_are_rederived_from_their_readings(tmp_path):
    """A row whose energy was worked out some other way gets today's window arithmetic back from its readings."""
    from joulecast.data.collect.collector import rederive
    from joulecast.data.store import load_samples

    clock = Clock()
    p = plan()
    collect(p, tmp_path, ReplayMeter(trace(power_w=300.0, step=0.01), clock), FakeRunner(clock), progress=False,
            sleep=clock.sleep, clock=clock)
    rows, samples = load_store(tmp_path), load_samples(tmp_path, "h200", "test")
    spoiled = rows.assign(energy_j=rows["energy_j"] * 1.1, power_w=1.0, spread_rel=0.5)
    again = rederive(spoiled, samples, p.settings)
    for column in ("energy_j", "power_w", "spread_rel", "time_s"):
        assert np.allclose(again[column], rows[column], rtol=1e-9, atol=1e-12), column
    assert math.isclose(again["power_w"].iloc[0], 300.0, rel_tol=1e-6)
    alone = rederive(spoiled, samples.iloc[:0], p.settings)  # no readings: nothing to go on, nothing changes
    assert alone["energy_j"].equals(spoiled["energy_j"])


class CardRunner(FakeRunner):
    """A FakeRunner that reports a card's properties, as TorchRunner reads them from PyTorch."""

    def __init__(self, clock, sm_count, capability, memory_gib):
        super().__init__(clock)
        self.card = dict(device_name="card", sm_count=str(sm_count), compute_capability=capability,
                         memory_gib=str(memory_gib))

    def describe(self):
        return {**super().describe(), **self.card}


class LimitMeter(ReplayMeter):
    """A ReplayMeter that reports the board's default power limit, as NvmlMeter does."""

    def __init__(self, samples, clock, default_w):
        super().__init__(samples, clock)
        self.default_w = default_w

    def describe(self):
        return {**super().describe(), "power_limit_default_w": str(self.default_w)}


def test_a_plan_run_on_another_card_is_refused_before_anything_is_stored(tmp_path):
    """An H100 (132 SMs, 9.0, 79.2 GiB, 700 W) where the plan names the H200 (132 SMs, 9.0, 141 GB): its rows would be
    filed as the H200's. Refused with one line naming the card it is; run as that card, they are stored under it."""
    from joulecast.data.errors import InputError

    clock = Clock()
    meter, runner = LimitMeter(trace(), clock, 700.0), CardRunner(clock, 132, "9.0", 79.2)
    with pytest.raises(InputError) as refused:
        collect(plan(), tmp_path, meter, runner, progress=False, sleep=clock.sleep, clock=clock)
    assert refused.value.field == "gpu" and "--gpu h100-sxm" in refused.value.message
    assert "plan is for h200" in refused.value.message and "\n" not in str(refused.value)
    assert runner.prepared == [] and not any(tmp_path.iterdir())  # nothing measured, no card, no rows
    as_h100 = dataclasses.replace(plan(), gpu="h100-sxm")
    result = collect(as_h100, tmp_path, meter, runner, progress=False, sleep=clock.sleep, clock=clock)
    rows = load_store(tmp_path)
    assert result.written == 3 and set(rows["gpu"]) == {"h100-sxm"} and (tmp_path / "h100-sxm" / "test").is_dir()


@pytest.mark.parametrize("reported, expected", [
    (dict(sm_count=108, compute_capability="8.0", memory_gib=39.4, power_limit_default_w=250), ["a100-pcie-40gb"]),
    (dict(sm_count=108, compute_capability="8.0", memory_gib=39.4, power_limit_default_w=400), ["a100-sxm4-40gb"]),
    (dict(sm_count=108, compute_capability="8.0", memory_gib=39.4), ["a100-pcie-40gb", "a100-sxm4-40gb"]),
    (dict(sm_count=108, compute_capability="8", memory_gib=79.2, power_limit_default_w=400), ["a100-sxm4-80gb"]),
    (dict(sm_count=132, compute_capability="9.0", memory_gib=140.4, power_limit_default_w=700), ["h200"]),
    (dict(sm_count=72, compute_capability="8.6", memory_gib=22.2, power_limit_default_w=150), ["a10"]),
    (dict(sm_count=98, compute_capability="9.0", memory_gib=60.0, power_limit_default_w=500), []),  # a MIG-like slice
    (dict(sm_count=132, compute_capability="9.0", memory_gib=93.1, power_limit_default_w=400), []),  # an H100 NVL
    (dict(sm_count=108, compute_capability="8.0", memory_gib=79.2, power_limit_default_w=500), []),  # a 500 W A100
])
def test_a_device_is_told_by_its_sms_capability_memory_and_default_power_limit(reported, expected):
    from joulecast.data.collect.device_check import check_device, device_identity, matching_gpus
    from joulecast.data.errors import InputError

    device = {k: str(v) for k, v in reported.items()}
    assert matching_gpus(device_identity(device)) == expected
    for gpu in expected:
        check_device(gpu, device)  # the card it is passes
    with pytest.raises(InputError, match="no catalog GPU matches" if not expected else f"--gpu {expected[0]}"):
        check_device("l40s", device)
    check_device("l40s", {"name": "replay"})  # a device that reports no card is not checked


def test_no_two_catalog_gpus_of_one_sm_count_and_capability_share_a_memory_band_and_each_is_told_alone():
    """Each catalog GPU's memory band (MEMORY_SHARE of its GB) holds no other of its SMs and capability but one of the
    same memory, which the default power limit tells apart; a card reporting a catalog GPU's own figures is that GPU
    and no other."""
    from joulecast.data.collect.device_check import MEMORY_SHARE, matching_gpus
    from joulecast.data.gpus import catalog

    lo, hi = MEMORY_SHARE
    specs = list(catalog().values())
    for a in specs:
        for b in specs:
            if a.name < b.name and (a.sm_count, a.compute_capability) == (b.sm_count, b.compute_capability):
                apart = a.memory_gb * hi < b.memory_gb * lo or b.memory_gb * hi < a.memory_gb * lo
                assert apart or (a.memory_gb == b.memory_gb and a.power_limit_w != b.power_limit_w), (a.name, b.name)
    for spec in specs:  # each, reporting what its card would (a little under its GB, its own limit), is itself alone
        reported = dict(sm_count=spec.sm_count, compute_capability=spec.compute_capability,
                        memory_gib=0.95 * spec.memory_gb, power_limit_default_w=spec.power_limit_w)
        assert matching_gpus(reported) == [spec.name]


def test_masked_attention_is_causal_attention_given_its_mask_as_a_tensor():
    """`attention="masked"` (transformers 4.38-4.39's Llama: SDPA handed the causal mask) computes what the causal
    flash path does, grouped heads included, from the same weights: only the kernel PyTorch picks differs."""
    torch = require_module("torch", "the [collect] extra (torch)", "JOULECAST_REQUIRE_TORCH")
    from joulecast.data.collect.torch_models import Transformer
    from joulecast.data.models import model_entry

    config = {**model_entry("llama-3-8b")["config"], **TINY}
    torch.manual_seed(0)
    flash = Transformer(config, "flash").eval()
    masked = Transformer(config, "masked").eval()
    masked.load_state_dict(flash.state_dict())
    tokens = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        expected, got = flash(tokens), masked(tokens)
    assert masked.blocks[0]._mask.shape == (12, 12) and torch.isinf(masked.blocks[0]._mask).sum() == 0
    assert (masked.blocks[0]._mask < -1e30).sum() == 12 * 11 // 2  # the dtype's minimum above the diagonal alone
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4)
