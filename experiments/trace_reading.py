"""A public serving trace read as `serve --requests` reads it: the CPU time of `joulecast.read_requests` on a
trace in the Azure LLM inference trace's form (TIMESTAMP,ContextTokens,GeneratedTokens; the 2024 week-long traces
hold 17-27 million rows) beside pandas reading the same file alone, and of the serving estimate its load then takes:
at its mean rate, and window by window (`--window`: each hour, and each minute, at its own rate), with the CPU time
of each; hour by hour autoscaled over 4 instances (each hour the fewest that serve it; its spares off, off with
a cold start of COLD_START_S a start, or idle; with HEADROOM over each hour's rate; on a TTFT_TARGET_S target for
a request's mean time to first token, a TTFT_P99_TARGET_S one for 99 % of them, or an ITL_P99_TARGET_S one for 99 %
of each hour's gaps between a request's tokens; and reactive, each hour sized by the hour before it, the excess of an
hour that outgrew it queued, with and without HEADROOM, and scaling REACTION_S after each hour's load changes and in
no sooner than SCALE_IN_DELAY_S allows); and hour by hour on one
instance, its busy hours' excess queued for the hours after them (`--queue`). The trace is synthetic,
written here (no trace is in ../shared): arrivals over a week with a daily cycle (the rate 1 + 0.6 sin(2 pi t / day)
times its mean, as production LLM traffic follows the day: the Azure traces' own plots), prompt lengths 1-8,000
tokens, answers 0-800 (a row of 0, a failed request, left out). A second week, the same arrivals, has lengths that
follow the day against the rate (x 1 - 0.5 sin(2 pi t / day): long prompts and answers in the quiet hours, as batch
work fills the night): its hours priced at the week's mean lengths, at each hour's own in length classes (the
default, `estimator.serve_windows`), and with a grid of steps for every hour (the classes' reference), with the CPU
time of each. Usage: python experiments/trace_reading.py [--rows N] [--json]"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import joulecast
from joulecast.estimator import serve_windows


DAILY_SWING = 0.6  # the rate's daily amplitude over its mean
LENGTH_SWING = 0.5  # the second week's lengths' daily amplitude over their mean, against the rate
INSTANCES = 2  # H100s the load is spread over (the busiest hours past one's capacity)
# An instance's start, autoscaled: Wilkins' 7B models loaded in 7-64 s on one GPU (experiments/cold_start.py)
COLD_START_S = 60.0
HEADROOM = 0.25  # capacity kept over each hour's rate, autoscaled: the instances at most 80 % busy
TTFT_TARGET_S = 0.5  # an autoscaler's latency target: each hour's mean time to first token
TTFT_P99_TARGET_S = 2.0  # and one on 99 % of each hour's first tokens
ITL_P99_TARGET_S = 0.1  # and one on 99 % of each hour's gaps between a request's tokens
# A reactive autoscaler that scales within the hour: a minute from the load's change to its decision (metrics scraped
# and averaged, then Kubernetes' HPA's 15 s sync), and in to the most needed over the HPA's default scale-down
# stabilization window, 300 s (its autoscaling/v2 `behavior.scaleDown.stabilizationWindowSeconds`)
REACTION_S = 60.0
SCALE_IN_DELAY_S = 300.0


def write_trace(path: Path, rows: int, length_swing: float = 0.0) -> None:
    rng = np.random.default_rng(0)
    drawn = rng.uniform(0, 7 * 86_400, 2 * rows)  # thinned to the daily cycle: about 1 / (1 + swing) kept
    kept = drawn[rng.uniform(0, 1 + DAILY_SWING, drawn.size) < 1 + DAILY_SWING * np.sin(2 * np.pi * drawn / 86_400)]
    seconds = np.sort(kept[:rows])
    stamps = pd.Timestamp("2024-05-10") + pd.to_timedelta(seconds, unit="s")
    scale = 1 - length_swing * np.sin(2 * np.pi * seconds / 86_400)  # long work in the quiet hours
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"),
                  "ContextTokens": np.maximum(1, rng.integers(1, 8_000, rows) * scale).astype(np.int64),
                  "GeneratedTokens": np.round(rng.integers(0, 800, rows) * scale).astype(np.int64)}
                 ).to_csv(path, index=False)


def lengths_by_hour(rows: int) -> dict[str, dict[str, float]]:
    """The second week (lengths that follow the day) hour by hour on INSTANCES H100s: at the week's mean lengths,
    at each hour's own in length classes, and with every hour its own grid of steps; energy, J a token, CPU time."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "AzureLLMInferenceTrace_lengths.csv"
        write_trace(path, rows, LENGTH_SWING)
        trace = joulecast.read_requests(path)
    own = trace.serving(window_s=3600)
    mean = {k: v for k, v in own.items() if k != "window_lengths"} | trace.load()
    bins = serve_windows.LENGTH_BINS
    out = {}
    for name, load, classes in (("mean lengths", mean, bins), ("length classes", own, bins),
                                ("every hour its own", own, 10**6)):
        serve_windows.LENGTH_BINS = classes  # 10^6 a length: no two hours share a grid of steps
        try:
            job, spent = cpu(lambda: joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4",
                                                      instances=INSTANCES, **load))
        finally:
            serve_windows.LENGTH_BINS = bins
        out[name] = {"energy_kwh": job.energy_j / 3.6e6, "j_per_output_token": job.energy_per_output_token_j,
                     "serve_cpu_s": spent}
    return out


def cpu(call):
    """(call's result, CPU seconds)."""
    start = time.process_time()
    result = call()
    return result, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "AzureLLMInferenceTrace_synthetic.csv"
        write_trace(path, args.rows)
        _, reference_s = cpu(lambda: pd.read_csv(path))
        trace, read_s = cpu(lambda: joulecast.read_requests(path))
    joulecast.serve("llama-3-8b", "h100-sxm", input_len=64, output_len=8, concurrency=1)  # the model loaded, untimed
    jobs = {}
    for window in (None, 3600, 60):  # on 2 instances: the busiest hours are past what one H100 serves
        jobs[window] = cpu(lambda: joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", instances=INSTANCES,
                                                   **trace.serving(window_s=window)))
    auto, auto_s = cpu(lambda: joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", instances=4,
                                                autoscale=True, **trace.serving(window_s=3600)))
    variants = {name: joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", instances=4, autoscale=True,
                                      **extra, **trace.serving(window_s=3600))
                for name, extra in (("cold_start", dict(cold_start_s=COLD_START_S)), ("spares_idle",
                                    dict(spare="idle")), ("headroom", dict(headroom=HEADROOM,
                                                                           cold_start_s=COLD_START_S)),
                                   ("ttft_target", dict(ttft_target_s=TTFT_TARGET_S)),
                                   ("ttft_p99_target", dict(ttft_p99_target_s=TTFT_P99_TARGET_S)),
                                   ("itl_p99_target", dict(itl_p99_target_s=ITL_P99_TARGET_S)),
                                   ("reactive", dict(reactive=True, queue=True, cold_start_s=COLD_START_S)),
                                   ("reactive_headroom", dict(reactive=True, queue=True, cold_start_s=COLD_START_S,
                                                              headroom=HEADROOM)),
                                   ("reactive_minute", dict(reactive=True, queue=True, cold_start_s=COLD_START_S,
                                                            reaction_s=REACTION_S,
                                                            scale_in_delay_s=SCALE_IN_DELAY_S)))}
    one, one_s = cpu(lambda: joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", queue=True,
                                             **trace.serving(window_s=3600)))
    job, serve_s = jobs[None]
    figures = {"rows": args.rows, "kept": int(len(trace.input_len)), "left_out": trace.left_out,
               "request_rate": trace.request_rate, "peak_hour_rate": trace.peak_hour_rate,
               "read_requests_cpu_s": read_s, "pandas_read_csv_cpu_s": reference_s,
               "serve_cpu_s": serve_s, "energy_kwh": job.energy_j / 3.6e6,
               "j_per_output_token": job.energy_per_output_token_j,
               "windows": {str(w): {"windows": len(j.windows.request_rate), "serve_cpu_s": t,
                                    "energy_kwh": j.energy_j / 3.6e6, "j_per_output_token": j.energy_per_output_token_j,
                                    "idle_share": j.idle_share}
                           for w, (j, t) in jobs.items() if w is not None},
               "autoscaled": {"fleet": 4, "serve_cpu_s": auto_s, "energy_kwh": auto.energy_j / 3.6e6,
                              "j_per_output_token": auto.energy_per_output_token_j,
                              "instance_hours": float(auto.windows.instances.sum()), "ttft_s": auto.ttft_s,
                              "ttft_p99_s": auto.ttft_p99_s, "itl_p99_s": auto.itl_p99_s,
                              "worst_hour_ttft_s": float((auto.windows.prefill_s + auto.windows.slot_wait_s).max()),
                              "worst_hour_itl_p99_s": float(np.nanmax(auto.windows.itl_p99_s)),
                              **{name: {"energy_kwh": v.energy_j / 3.6e6, "starts": int(v.windows.started.sum()),
                                        "standby_kwh": float(v.windows.standby_j.sum()) / 3.6e6,
                                        "instance_hours": float(v.windows.instances.sum()), "ttft_s": v.ttft_s,
                                        "ttft_p99_s": v.ttft_p99_s, "itl_p99_s": v.itl_p99_s,
                                        "hours_ending_with_backlog": int((v.windows.backlog > 0).sum()),
                                        "worst_hour_itl_p99_s": float(np.nanmax(v.windows.itl_p99_s))}
                                 for name, v in variants.items()}},
               "queued_on_one": {"serve_cpu_s": one_s, "energy_kwh": one.energy_j / 3.6e6,
                                 "j_per_output_token": one.energy_per_output_token_j, "wait_s": one.wait_s,
                                 "hours_ending_with_backlog": int((one.windows.backlog > 0).sum()),
                                 "most_waiting": float(one.windows.backlog.max()),
                                 "drain_s": float(one.duration_s - trace.span_s)},
               "lengths_by_hour": lengths_by_hour(args.rows)}
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"{args.rows:,} rows ({trace.left_out:,} asking no output token left out), "
          f"{trace.request_rate:.2f} requests a second over {trace.span_s / 3600:.1f} h (its busiest hour "
          f"{trace.peak_hour_rate:.2f})")
    print(f"read_requests: {read_s:.2f} CPU-s; pandas.read_csv of the same file alone: {reference_s:.2f} CPU-s "
          f"({read_s / reference_s:.1f}x: the times parsed, the lengths checked)")
    print(f"serve at its mean rate (llama-3-8b, {INSTANCES} x h100-sxm, vllm-0.5.4): {serve_s:.2f} CPU-s; "
          f"{job.energy_j / 3.6e6:.2f} kWh for the week's {trace.output_len.sum():,} output tokens, "
          f"{job.energy_per_output_token_j:.3f} J each")
    for window, each in figures["windows"].items():
        print(f"  window by window, {each['windows']:,} windows of {window} s: {each['serve_cpu_s']:.2f} CPU-s; "
              f"{each['energy_kwh']:.2f} kWh, {each['j_per_output_token']:.3f} J an output token, idle "
              f"{100 * each['idle_share']:.1f} % of the time")
    scaled = figures["autoscaled"]
    print(f"  hour by hour on as few of {scaled['fleet']} instances as serve each hour: {scaled['serve_cpu_s']:.2f} "
          f"CPU-s; {scaled['energy_kwh']:.2f} kWh, {scaled['j_per_output_token']:.3f} J an output token, "
          f"{scaled['instance_hours']:.0f} instance-hours; a first token after {scaled['ttft_s']:.3f} s on average, "
          f"{scaled['worst_hour_ttft_s']:.1f} s in the worst hour, 99 % within {scaled['ttft_p99_s']:.1f} s; 99 % "
          f"of the gaps between tokens within {scaled['itl_p99_s']:.3f} s ({scaled['worst_hour_itl_p99_s']:.3f} s in "
          "the worst hour)")
    for name, what in (("cold_start", f"each start {COLD_START_S:.0f} s at idle power"),
                       ("spares_idle", "the spares idle, loaded"),
                       ("headroom", f"{100 * HEADROOM:.0f} % over each hour's rate, each start {COLD_START_S:.0f} s"),
                       ("ttft_target", f"a first token within {TTFT_TARGET_S:g} s on average each hour"),
                       ("ttft_p99_target", f"99 % of first tokens within {TTFT_P99_TARGET_S:g} s each hour"),
                       ("itl_p99_target", f"99 % of the gaps between tokens within {ITL_P99_TARGET_S:g} s each "
                                          "hour"),
                       ("reactive", "reactive, each hour on what the hour before needed, each start "
                                    f"{COLD_START_S:.0f} s, the excess queued"),
                       ("reactive_headroom", f"the same with {100 * HEADROOM:.0f} % over each hour's rate"),
                       ("reactive_minute", f"reactive, scaling {REACTION_S:.0f} s after each hour's load changes and "
                                           f"in to the most needed over {SCALE_IN_DELAY_S:.0f} s, each start "
                                           f"{COLD_START_S:.0f} s, the excess queued")):
        each = scaled[name]
        whose = "the spares'" if name == "spares_idle" else f"the {each['starts']} starts'"
        print(f"    {what}: {each['energy_kwh']:.2f} kWh ({each['standby_kwh']:.3f} of them {whose}), "
              f"{each['instance_hours']:.0f} instance-hours; a first token after {each['ttft_s']:.3f} s, 99 % within "
              f"{each['ttft_p99_s']:.3f} s; 99 % of the gaps within {each['itl_p99_s']:.3f} s "
              f"({each['worst_hour_itl_p99_s']:.3f} s in the worst hour)"
              + (f"; {each['hours_ending_with_backlog']} hours end with requests waiting"
                 if name.startswith("reactive") else ""))
    one = figures["queued_on_one"]
    print(f"  hour by hour on one instance, the excess queued: {one['serve_cpu_s']:.2f} CPU-s; "
          f"{one['energy_kwh']:.2f} kWh, {one['j_per_output_token']:.3f} J an output token; "
          f"{one['hours_ending_with_backlog']} hours end with requests waiting (at most {one['most_waiting']:,.0f}), "
          f"a request waits {one['wait_s']:.0f} s on average, the last hour runs {one['drain_s'] / 60:.0f} min on")
    reference = figures["lengths_by_hour"]["every hour its own"]["energy_kwh"]
    print(f"the same arrivals, lengths x (1 - {LENGTH_SWING} sin) over the day, hour by hour:")
    for name, each in figures["lengths_by_hour"].items():
        print(f"  {name}: {each['serve_cpu_s']:.2f} CPU-s; {each['energy_kwh']:.2f} kWh "
              f"({100 * (each['energy_kwh'] / reference - 1):+.2f} % against every hour its own), "
              f"{each['j_per_output_token']:.3f} J an output token")


if __name__ == "__main__":
    main()
