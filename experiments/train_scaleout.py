"""Training in-process against xgboost.dask on a LocalCluster: the same residual (the quick profile by default),
each booster fitted over the measurements split across the workers; CPU time of this process and wall time, and the
cross-validated MAPE of each (goal: within 0.2 points).

    python experiments/train_scaleout.py [--workers 2] [--full] [--json]

Rows: EnergAIzer's A10 / A100 ground truth (../shared/data/external/energaizer-artifact). On a 2-core machine the
workers share the cores with this process and the scheduler, so wall time measures overhead more than speed-up.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from shared_data import EXTERNAL

from joulecast.data.importers import import_source
from joulecast.training.train import train


def _timed(measurements, **kw) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    result = train(measurements, log_mlflow=False, **kw)
    m = result.metrics
    return dict(wall_s=time.perf_counter() - wall, cpu_s=time.process_time() - cpu,
                cv_energy_mape=m["cv_hybrid_energy_mape"], cv_time_mape=m["cv_hybrid_time_mape"],
                cv_power_mape=m["cv_hybrid_power_mape"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="the full profile (every hyper-parameter set)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from dask.distributed import Client, LocalCluster

    measurements = import_source("energaizer", EXTERNAL / "energaizer-artifact")
    quick = not args.full
    out = {"rows": int(len(measurements)), "profile": "full" if args.full else "quick",
           "in_process": _timed(measurements, quick=quick)}
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        out["dask"] = {**_timed(measurements, quick=quick, client=client), "workers": args.workers}
    out["energy_mape_difference_pts"] = out["dask"]["cv_energy_mape"] - out["in_process"]["cv_energy_mape"]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for name in ("in_process", "dask"):
        r = out[name]
        print(f"{name:>10}: wall {r['wall_s']:.1f} s, CPU here {r['cpu_s']:.1f} s; CV MAPE energy "
              f"{r['cv_energy_mape']:.2f} %, time {r['cv_time_mape']:.2f} %, power {r['cv_power_mape']:.2f} %")
    print(f"energy MAPE difference: {out['energy_mape_difference_pts']:+.2f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
