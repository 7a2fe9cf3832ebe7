"""A sweep's `--json` in the memory of a chunk: the peak Python memory (tracemalloc) and CPU time of writing its
points a chunk of records at a time (`joulecast.render.write_json`, what `joulecast sweep --json` does) beside
turning them into one list of dicts first (`to_json`, what it did before 2026-12-05), on the same physics points,
and whether both give the same text. Usage:
python experiments/sweep_json_memory.py [--configurations N] [--chunk-rows N] [--json]"""

from __future__ import annotations

import argparse
import io
import json
import time
import tracemalloc

from sweep_scaleout import configurations

from joulecast.estimator.sweep import sweep
from joulecast.render import JSON_CHUNK_ROWS, to_json, write_json


def measured(write) -> tuple[str, float, float]:
    """(the text, peak MB allocated while writing, CPU seconds)."""
    tracemalloc.start()
    cpu = time.process_time()
    text = write()
    cpu = time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return text, peak, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configurations", type=int, default=100_000)
    parser.add_argument("--chunk-rows", type=int, default=JSON_CHUNK_ROWS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    points = sweep(configurations(args.configurations), estimator="physics").points

    def chunked() -> str:
        out = io.StringIO()
        write_json({"points": points}, out, args.chunk_rows)
        return out.getvalue()

    def whole() -> str:
        return to_json({"points": points.to_dict(orient="records")}) + "\n"

    (a, peak_a, cpu_a), (b, peak_b, cpu_b) = measured(chunked), measured(whole)
    result = dict(points=len(points), json_mb=len(a.encode()) / 1e6, chunk_rows=args.chunk_rows,
                  chunked_peak_mb=peak_a, chunked_cpu_s=cpu_a, whole_peak_mb=peak_b, whole_cpu_s=cpu_b, same=a == b)
    if args.json:
        print(json.dumps(result))
        return
    # the text itself (the StringIO's copy) is counted in both; the rest is what each holds beside it
    print(f"{len(points):,} points, {result['json_mb']:,.0f} MB of JSON")
    print(f"  chunks of {args.chunk_rows:,} records (write_json): peak {peak_a:,.0f} MB allocated, {cpu_a:.1f} s CPU")
    print(f"  one list of dicts (to_json):    peak {peak_b:,.0f} MB allocated, {cpu_b:.1f} s CPU")
    print(f"  same text: {a == b}")


if __name__ == "__main__":
    main()
