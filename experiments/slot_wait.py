"""`serve`'s wait for a batch slot at a request rate (`slot_wait_s`, in `ttft_s`) against a simulation of the engine.

The estimate reads the requests in the engine as a birth-death chain on its capacity curve (`estimator.slot_wait`).
The simulation runs the engine as it runs: Poisson arrivals queue; at each step's start the queue fills the free
slots (at most max_batch), each waiting from its arrival to then; the step lasts as long as `serve`'s step at that
batch (`serve` at that concurrency, Llama-3-8B on an H100 with vLLM 0.5.4's host work, 500-token prompts, 100-token
answers on average), and each request in it makes a token, leaving after its answer's last. Answers all as long
(cv 0) or of geometric length (cv about 1; the steps then `serve`'s at that spread). For 8, 32 and 256 slots at
50-95 % of the capacity at max_batch, the simulated mean wait and its 99th percentile (after the first tenth of the
requests, over SEEDS runs of a million requests each: at 100,000 a run near capacity one run's mean swings by 10 % and
more, and the scores by several points) beside the estimate's, and their CPU time (about 4 CPU-minutes in all).

Run: python experiments/slot_wait.py [--requests N] [--json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections import deque

import numpy as np

import joulecast
from joulecast.estimator.serving import TTFT_QUANTILE

MODEL, GPU, ENGINE = "llama-3-8b", "h100-sxm", "vllm-0.5.4"
INPUT_LEN, OUTPUT_LEN = 500, 100
SLOTS = (8, 32, 256)
LOADS = (0.5, 0.8, 0.9, 0.95)
SPREADS = (0.0, 1.0)
SEEDS = 3


def steps(slots: int, cv: float) -> tuple[np.ndarray, np.ndarray]:
    """The engine's step (s) at batches 1..slots, from `serve` at each concurrency on its grid, read between."""
    grid = np.unique(np.round(np.geomspace(1, slots, 24)).astype(int))  # serve's own (its rate path's)
    seconds = [joulecast.serve(MODEL, GPU, engine=ENGINE, input_len=INPUT_LEN, output_len=OUTPUT_LEN,
                               concurrency=int(b), max_batch=slots, output_len_cv=cv, estimator="physics").step_time_s
               for b in grid]
    n = np.arange(1, slots + 1)
    return n, np.interp(n, grid, seconds)


def simulate(rate: float, slots: int, step_s: np.ndarray, cv: float, requests: int, seed: int = 0) -> np.ndarray:
    """The waits for a slot (s) of `requests` Poisson arrivals at `rate`, the first tenth left out."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, requests))
    lengths = (np.full(requests, OUTPUT_LEN) if cv == 0.0
               else rng.geometric(1.0 / OUTPUT_LEN, requests))  # mean OUTPUT_LEN, cv sqrt(1 - 1/OUTPUT_LEN)
    waits = np.zeros(requests)
    queue: deque[int] = deque()
    finishing: list[int] = []  # each request in service's last step, a heap
    t, step, arrived = 0.0, 0, 0
    while arrived < requests or queue or finishing:
        while arrived < requests and arrivals[arrived] <= t:
            queue.append(arrived)
            arrived += 1
        if not finishing and not queue:  # idle: on to the next arrival
            t = arrivals[arrived]
            continue
        while queue and len(finishing) < slots:
            k = queue.popleft()
            waits[k] = t - arrivals[k]
            heapq.heappush(finishing, step + int(lengths[k]))
        t += step_s[len(finishing) - 1]
        step += 1
        while finishing and finishing[0] <= step:
            heapq.heappop(finishing)
    return waits[requests // 10:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for slots in SLOTS:
        for cv in SPREADS:
            n, step_s = steps(slots, cv)
            capacity = float(np.max(n / (OUTPUT_LEN * step_s)))
            for load in LOADS:
                rate = load * capacity
                start = time.process_time()
                est = joulecast.serve(MODEL, GPU, engine=ENGINE, input_len=INPUT_LEN, output_len=OUTPUT_LEN,
                                      request_rate=rate, max_batch=slots, output_len_cv=cv, estimator="physics")
                est_s = time.process_time() - start
                start = time.process_time()
                runs = [simulate(rate, slots, step_s, cv, args.requests, seed) for seed in range(SEEDS)]
                simulated = float(np.mean([run.mean() for run in runs]))
                simulated_p99 = float(np.mean([np.quantile(run, TTFT_QUANTILE) for run in runs]))
                rows.append({"slots": slots, "load": load, "cv": cv, "rate": rate, "batch": est.batch,
                             "simulated_wait_s": simulated, "estimated_wait_s": est.slot_wait_s,
                             "simulated_p99_s": simulated_p99, "estimated_p99_s": est.ttft_p99_s - est.prefill_s,
                             "step_s": est.step_time_s, "estimate_cpu_s": est_s,
                             "simulation_cpu_s": time.process_time() - start})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{MODEL} on {GPU}, {ENGINE}, {INPUT_LEN} tokens in, {OUTPUT_LEN} out on average; {args.requests:,} "
          f"requests a simulation. A request's mean wait for a slot:")
    print(f"{'slots':>5} {'load':>5} {'cv':>4} {'batch':>6} {'mean, simulated':>16} {'estimated':>10} "
          f"{'p99, simulated':>15} {'estimated':>10} {'a step':>9}")
    for r in rows:
        print(f"{r['slots']:>5} {r['load']:>5.2f} {r['cv']:>4.1f} {r['batch']:>6.1f} {r['simulated_wait_s']:>15.4f}s "
              f"{r['estimated_wait_s']:>9.4f}s {r['simulated_p99_s']:>14.4f}s {r['estimated_p99_s']:>9.4f}s "
              f"{r['step_s']:>8.4f}s")
    for name in ("wait", "p99"):
        errors = [100 * (r[f"estimated_{name}_s"] / r[f"simulated_{name}_s"] - 1) for r in rows]
        print(f"the estimate's {'mean' if name == 'wait' else name} against the simulation's: "
              f"{np.mean(np.abs(errors)):.1f} % mean absolute error, {min(errors):+.1f} to {max(errors):+.1f} %")
    cpu = sum(r["estimate_cpu_s"] for r in rows) / len(rows)
    print(f"an estimate {1000 * cpu:.1f} CPU-ms on average; a simulation "
          f"{sum(r['simulation_cpu_s'] for r in rows) / len(rows):.2f} CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
