"""Speed of the estimate path, as CPU time (`time.process_time`, less disturbed by a busy machine than wall time),
each figure beside a reference measured in the same run:

1. cold start: `joulecast estimate` in a fresh process, with the shipped hybrid model, against
   `python -c "import numpy, pandas"` (the child's user + system CPU time; target at most 2x);
2. one warm estimate with its interval, median CPU ms (targets: 1 ms for llama-3-8b prefill, 2 ms for llama-3-70b
   training), beside a plain-numpy roofline pass over the same kernel rows (measured between the estimates, which
   leaves each next one colder); and the same estimates back to back, nothing between them;
3. whole jobs, warm, median CPU ms (no target; each job's steps go through `estimate_many` in one call, so this is
   mostly its fixed cost a call): the README's `generate` (Llama-3-8B on the H100, 16 x 1,024 tokens in and 256
   out: 256 passes), a `serve` at a concurrency (one step, the two a request's prompt is priced at, and the six its
   gaps between tokens are read at) and at a request rate (a grid of 21 batch sizes and the prompt's two at 6 of them
   in one `estimate_batch` call, and the six) and a LoRA `train_run`, beside the plain-numpy roofline pass over 40
   kernel rows a pass;
4. `estimate_many` over distinct configurations (models x phases x batch x sequence x GPU x clock; target 20,000 per
   CPU-second and at most 1 GB peak memory), and over repeated ones, in a child process whose peak resident memory
   is read from the kernel, beside a plain-numpy roofline pass over all their kernel rows.

Usage: python experiments/speed.py [--distinct N] [--repeats N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd

LANGUAGE = ("gpt2", "bert-large", "opt-1.3b", "qwen2-1.5b", "llama-3-8b", "mistral-7b", "qwen2-7b", "llama-3-70b")
GPUS = ("a10", "a100-pcie-40gb", "h100-sxm", "h200", "l40s")
COLD = ["estimate", "--model", "gpt2", "--gpu", "a100-pcie-40gb", "--batch", "8", "--seq", "512"]
WARM = (("llama-3-8b", "prefill", 8, 1024, "h100-sxm", 1.0), ("llama-3-70b", "training", 4, 4096, "h200", 2.0))


def child_cpu_s(argv: list[str]) -> tuple[float, float]:
    """(user + system CPU seconds, peak resident MB) of one child process, read from the kernel (wait4)."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise RuntimeError(f"{argv} failed ({status})")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def cold_start(repeats: int) -> dict[str, float]:
    cli = [sys.executable, "-c", "import sys; from joulecast.cli import main; sys.exit(main(sys.argv[1:]))", *COLD]
    base = [sys.executable, "-c", "import numpy, pandas"]
    child_cpu_s(cli)  # the first run compiles bytecode: not a cold start a user sees twice
    cli_s = float(np.median([child_cpu_s(cli)[0] for _ in range(repeats)]))
    base_s = float(np.median([child_cpu_s(base)[0] for _ in range(repeats)]))
    return {"cold_estimate_cpu_s": cli_s, "import_numpy_pandas_cpu_s": base_s, "cold_ratio": cli_s / base_s}


def roofline(columns: dict[str, np.ndarray], peak_flops: float, bandwidth: float) -> float:
    """The plain-numpy reference: a roofline time and energy over kernel rows, summed (a dozen array operations)."""
    t = np.maximum(columns["flops"] / peak_flops, columns["dram_bytes"] / bandwidth) + 2e-6
    energy = t * (100.0 + 200.0 * np.minimum(1.0, columns["flops"] / (t * peak_flops)))
    return float(np.sum(columns["launches"] * energy))


def warm(repeats: int) -> list[dict[str, float]]:
    import joulecast

    joulecast.estimate(joulecast.workload("gpt2"), "a10")  # the shipped model loaded, as in a long-lived process
    out = []
    for model, phase, batch, seq, gpu, target in WARM:
        spec = joulecast.gpu(gpu)
        cpu, numpy_ref = [], []
        for i in range(repeats):
            start = time.process_time()
            est = joulecast.estimate(joulecast.workload(model, phase=phase, batch=batch + i % 2, seq=seq), gpu)
            cpu.append(time.process_time() - start)
            assert est.energy_interval_j is not None
            columns = {c: np.asarray(est.kernel_columns[c], float) for c in ("flops", "dram_bytes", "launches")}
            start = time.process_time()
            for _ in range(100):
                roofline(columns, spec.tensor_tflops["bf16"] * 1e12, spec.memory_bandwidth_bps)
            numpy_ref.append((time.process_time() - start) / 100)
        # the same estimates one after another, nothing between them (the reference pass above leaves each next
        # estimate colder: a long-lived process doing other work between estimates, which is what the target reads)
        back_to_back = []
        for i in range(repeats):
            start = time.process_time()
            joulecast.estimate(joulecast.workload(model, phase=phase, batch=batch + i % 2, seq=seq), gpu)
            back_to_back.append(time.process_time() - start)
        out.append({"case": f"{model} {phase} b{batch} s{seq} on {gpu}", "kernel_rows": len(columns["flops"]),
                    "median_cpu_ms": 1e3 * float(np.median(cpu)), "p95_cpu_ms": 1e3 * float(np.percentile(cpu, 95)),
                    "back_to_back_median_cpu_ms": 1e3 * float(np.median(back_to_back)),
                    "target_ms": target, "numpy_reference_ms": 1e3 * float(np.median(numpy_ref))})
    return out


JOBS = (("generate", dict(model="llama-3-8b", gpu="h100-sxm", batch=16, input_len=1024, output_len=256)),
        ("serve", dict(model="llama-3-8b", gpu="h100-sxm", input_len=512, output_len=256, concurrency=64)),
        ("serve at a rate", dict(model="llama-3-8b", gpu="h100-sxm", input_len=512, output_len=256, request_rate=4.0,
                                 engine="vllm-0.5.4")),
        ("train_run", dict(model="llama-3-8b", gpu="h100-sxm", steps=1000, global_batch=64, seq=2048, micro_batch=4,
                           lora_rank=16)))


def jobs(repeats: int) -> list[dict[str, float]]:
    """Each of JOBS estimated `repeats` times warm (the shipped model loaded), its median CPU ms, beside the numpy
    reference over 40 kernel rows for each of the job's steps."""
    import joulecast
    from joulecast.estimator import serving, token_gaps
    from joulecast.features.serve_step import CHUNK_TOKENS

    out = []
    for name, kwargs in JOBS:
        call = getattr(joulecast, name.split()[0])
        est = call(**kwargs)  # the model and the structure's template loaded
        # a generation's passes (its steps table); serving its step (at a rate, its grid of batch sizes: one
        # estimate pass over them), the steps its requests' prompts run in (at a rate, at PREFILL_BATCHES of the
        # grid's) and the steps its gaps between tokens are read at (`token_gaps.prompt_points`); train_run reports
        # none: one
        serving_steps = 0
        if name.startswith("serve"):
            size = dict(input_len=float(kwargs["input_len"]), output_len=float(kwargs["output_len"]),
                        output_len_cv=0.0, input_len_cv=0.0)
            first = len(serving._first_sizes(size, CHUNK_TOKENS, int(kwargs.get("concurrency", 256)))[0])
            serving_steps = len(token_gaps.prompt_points(CHUNK_TOKENS)) + (
                len(np.unique(np.round(np.geomspace(1, 256, 24)))) + first * serving.PREFILL_BATCHES
                if "request_rate" in kwargs else 1 + first)
        steps = len(est.steps) if isinstance(getattr(est, "steps", None), pd.DataFrame) else serving_steps or 1
        cpu = []
        for _ in range(repeats):
            start = time.process_time()
            call(**kwargs)
            cpu.append(time.process_time() - start)
        reference = numpy_reference_rows(steps)["numpy_reference_cpu_s"]
        out.append({"job": name, "steps": steps, "median_cpu_ms": 1e3 * float(np.median(cpu)),
                    "numpy_reference_ms": 1e3 * reference})
    return out


def distinct_configurations(n: int, seed: int = 0) -> pd.DataFrame:
    """`n` distinct configurations drawn from models x phases x batch x sequence x GPU x clock."""
    import joulecast

    rng = np.random.default_rng(seed)
    batches, seqs = np.arange(1, 65), np.arange(64, 4097, 64)
    rows = set()
    while len(rows) < n:
        model = LANGUAGE[rng.integers(len(LANGUAGE))]
        phases = ("prefill", "training") if model == "bert-large" else ("prefill", "decode", "training")
        gpu = GPUS[rng.integers(len(GPUS))]
        clock = (np.nan, 0.7, 0.85, 0.95)[rng.integers(4)]
        rows.add((model, phases[rng.integers(len(phases))], int(rng.choice(batches)), int(rng.choice(seqs)), gpu,
                  clock))
    frame = pd.DataFrame(sorted(rows, key=str), columns=["model", "phase", "batch", "seq", "gpu", "clock"])
    boost = frame["gpu"].map(lambda g: joulecast.gpu(g).boost_clock_mhz)
    frame["sm_clock_mhz"] = np.round(frame.pop("clock") * boost)
    return frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def batch_child(n: int, estimator: str | None, repeated: bool) -> None:
    """Run in a child process: estimate_many over `n` configurations, printing CPU seconds as JSON."""
    import joulecast

    frame = distinct_configurations(100 if repeated else n)
    if repeated:
        frame = frame.iloc[np.arange(n) % len(frame)].reset_index(drop=True)
    joulecast.estimate_many(frame.head(2), estimator=estimator)  # the model loaded, as in a long-lived process
    start = time.process_time()
    out = joulecast.estimate_many(frame, estimator=estimator)
    cpu = time.process_time() - start
    assert len(out) == n and np.isfinite(out["energy_j"]).all()
    print(json.dumps({"cpu_s": cpu}))


def batch(n: int, estimator: str | None, repeated: bool = False) -> dict[str, float]:
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import speed; "
            f"speed.batch_child({n}, {estimator!r}, {repeated})")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    stdout = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise RuntimeError(f"estimate_many child failed ({status})")
    cpu = json.loads(stdout.decode().strip().splitlines()[-1])["cpu_s"]
    return {"configurations": n, "estimator": estimator or "hybrid", "repeated": repeated,
            "per_cpu_s": n / cpu, "peak_mb": usage.ru_maxrss / 1024}


def numpy_reference_rows(n: int) -> dict[str, float]:
    """The plain-numpy roofline pass over as many kernel rows as `n` configurations lower to (about 40 each)."""
    rows = 40 * n
    rng = np.random.default_rng(0)
    columns = {"flops": rng.uniform(1e6, 1e12, rows), "dram_bytes": rng.uniform(1e4, 1e9, rows),
               "launches": np.ones(rows)}
    start = time.process_time()
    roofline(columns, 1e15, 3e12)
    cpu = time.process_time() - start
    return {"kernel_rows": rows, "numpy_reference_cpu_s": cpu, "per_cpu_s": n / cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distinct", type=int, default=100_000, help="configurations for estimate_many")
    parser.add_argument("--repeats", type=int, default=200, help="warm estimates per case (cold: a tenth)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = {"cold": cold_start(max(3, args.repeats // 20)), "warm": warm(args.repeats),
               "jobs": jobs(max(3, args.repeats // 10)),
               "batch": [batch(args.distinct, "physics"), batch(args.distinct, None),
                         batch(args.distinct, None, repeated=True)],
               "batch_numpy_reference": numpy_reference_rows(args.distinct)}
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    c = figures["cold"]
    print(f"cold `joulecast {' '.join(COLD)}`: {c['cold_estimate_cpu_s']:.2f} s CPU against "
          f"{c['import_numpy_pandas_cpu_s']:.2f} s for `import numpy, pandas` ({c['cold_ratio']:.2f}x; target <= 2x)")
    for w in figures["warm"]:
        print(f"warm {w['case']} ({w['kernel_rows']} kernel rows): median {w['median_cpu_ms']:.2f} ms CPU, p95 "
              f"{w['p95_cpu_ms']:.2f} ms (target {w['target_ms']:g} ms); numpy reference "
              f"{w['numpy_reference_ms']:.3f} ms; back to back, nothing between estimates: median "
              f"{w['back_to_back_median_cpu_ms']:.2f} ms")
    for j in figures["jobs"]:
        print(f"warm {j['job']} ({j['steps']} pass{'es' if j['steps'] > 1 else ''} estimated): median "
              f"{j['median_cpu_ms']:.2f} ms CPU; numpy reference over 40 kernel rows a pass "
              f"{j['numpy_reference_ms']:.3f} ms")
    for b in figures["batch"]:
        print(f"estimate_many, {b['estimator']}, {b['configurations']:,} {'repeated' if b['repeated'] else 'distinct'} "
              f"configurations: {b['per_cpu_s']:,.0f} per CPU-second, peak {b['peak_mb']:,.0f} MB")
    r = figures["batch_numpy_reference"]
    print(f"numpy reference: a roofline pass over {r['kernel_rows']:,} kernel rows, {r['numpy_reference_cpu_s']:.2f} s "
          f"CPU ({r['per_cpu_s']:,.0f} configurations per CPU-second)")


if __name__ == "__main__":
    main()
