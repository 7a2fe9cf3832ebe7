"""A public serving trace read as `serve --requests` reads it: the CPU time of `joulecast.read_requests` on a
trace in the Azure LLM inference trace's form (TIMESTAMP,ContextTokens,GeneratedTokens; the 2024 week-long traces
hold 17-27 million rows) beside pandas reading the same file alone, and of the serving estimate its load then takes.
The trace is synthetic, written here (no trace is in ../shared): arrivals uniform over a week, prompt lengths 1-8,000
tokens, answers 0-800 (a row of 0, a failed request, left out). Usage:
python experiments/trace_reading.py [--rows N] [--json]"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import joulecast


def write_trace(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    stamps = pd.Timestamp("2024-05-10") + pd.to_timedelta(np.sort(rng.uniform(0, 7 * 86_400, rows)), unit="s")
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": rng.integers(1, 8_000, rows),
                  "GeneratedTokens": rng.integers(0, 800, rows)}).to_csv(path, index=False)


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
    job, serve_s = cpu(lambda: joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4",
                                               **trace.serving()))
    figures = {"rows": args.rows, "kept": int(len(trace.input_len)), "left_out": trace.left_out,
               "request_rate": trace.request_rate, "read_requests_cpu_s": read_s, "pandas_read_csv_cpu_s": reference_s,
               "serve_cpu_s": serve_s, "energy_kwh": job.energy_j / 3.6e6,
               "j_per_output_token": job.energy_per_output_token_j}
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"{args.rows:,} rows ({trace.left_out:,} asking no output token left out), "
          f"{trace.request_rate:.2f} requests a second over {trace.span_s / 3600:.1f} h")
    print(f"read_requests: {read_s:.2f} CPU-s; pandas.read_csv of the same file alone: {reference_s:.2f} CPU-s "
          f"({read_s / reference_s:.1f}x: the times parsed, the lengths checked)")
    print(f"serve at its load (llama-3-8b, h100-sxm, vllm-0.5.4): {serve_s:.2f} CPU-s; "
          f"{job.energy_j / 3.6e6:.2f} kWh for the week's {trace.output_len.sum():,} output tokens, "
          f"{job.energy_per_output_token_j:.3f} J each")


if __name__ == "__main__":
    main()
