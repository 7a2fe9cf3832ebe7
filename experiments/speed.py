"""Speed of end-to-end estimates: milliseconds per workload (p50, p95) and estimates per second in a batch.

"End to end" = lowering the model config to kernels + tiles/traffic + physics + the learned residual and its interval
(the shipped hybrid model) + breakdown, as `joulecast estimate` does minus argument parsing; the batch figure is
`joulecast.estimate_many` on a DataFrame. Usage: python experiments/speed.py [--repeats N]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

import joulecast
from joulecast.data.kernels import stack
from joulecast.features import arch, physics

CASES = [("gpt2", "a100-pcie-40gb", 8, 512), ("llama-3-8b", "h100-sxm", 8, 1024), ("llama-3-70b", "h200", 4, 4096)]


def per_workload(repeats: int) -> None:
    joulecast.estimate(joulecast.workload("gpt2"), "a100")  # load the shipped model once, as a long-lived process would
    print(f"{'workload':<34}{'gpu':<16}{'hybrid p50 ms':>14}{'p95 ms':>9}{'physics p50':>13}{'learned part':>14}")
    for model, gpu, batch, seq in CASES:
        times: dict[str, list[float]] = {"hybrid": [], "physics": []}
        for i in range(repeats):
            for method in times:
                start = time.perf_counter()
                w = joulecast.workload(model, batch=batch + i % 2, seq=seq)  # vary the shape: no cache can answer
                joulecast.estimate(w, gpu, estimator=None if method == "hybrid" else "physics")
                times[method].append(time.perf_counter() - start)
        p50, p95 = np.percentile(np.array(times["hybrid"]) * 1e3, [50, 95])
        physics_p50 = np.median(times["physics"]) * 1e3
        # the learned part (residual, interval, domain check) is the difference: it moves less with machine load
        print(f"{model + f' b{batch} s{seq} prefill':<34}{gpu:<16}{p50:>14.2f}{p95:>9.2f}{physics_p50:>13.2f}"
              f"{p50 - physics_p50:>14.2f}")


def batch_throughput(n: int = 1000) -> None:
    rng = np.random.default_rng(0)
    models = ["gpt2", "bert-large", "opt-1.3b", "qwen2-1.5b", "llama-3-8b", "mistral-7b", "qwen2-7b", "llama-3-70b"]
    configs = [(models[i % len(models)], int(rng.choice([1, 2, 4, 8, 16, 32])), int(rng.choice([128, 256, 512, 1024])))
               for i in range(n)]
    gpu = joulecast.gpu("h100-sxm")
    start = time.perf_counter()
    tables = {i: joulecast.workload(m, batch=b, seq=s).kernels for i, (m, b, s) in enumerate(configs)}
    lowered = time.perf_counter()
    _, totals = physics.analyze(stack(tables), gpu, host_dispatch_s=arch.HOST_DISPATCH_S["eager"])
    done = time.perf_counter()
    assert len(totals.energy_j) == n
    print(f"\nbatch of {n} configurations on {gpu.name}: physics {n / (done - start):,.0f} estimates/s "
          f"(lowering {1e3 * (lowered - start):.0f} ms, one vectorised physics pass over {sum(len(t) for t in tables.values()):,} "
          f"kernel rows {1e3 * (done - lowered):.0f} ms)")
    frame = pd.DataFrame({"model": [c[0] for c in configs], "batch": [c[1] for c in configs],
                          "seq": [c[2] for c in configs], "gpu": gpu.name})
    start = time.perf_counter()
    out = joulecast.estimate_many(frame)
    elapsed = time.perf_counter() - start
    assert len(out) == n and out["method"].iloc[0] == "hybrid"
    print(f"estimate_many, hybrid with intervals: {n / elapsed:,.0f} estimates/s ({1e3 * elapsed:.0f} ms for {n})")


if __name__ == "__main__":
    repeats = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 200
    per_workload(repeats)
    batch_throughput()
    print("\nReference: EnergAIzer takes about 1.8 s per estimate; target here: under 5 ms per workload.")
