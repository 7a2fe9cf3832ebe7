"""A bounded load test of `joulecast serve` on 127.0.0.1: 50 concurrent clients, each posting estimates of distinct
configurations; prints p50 / p99 latency, requests a second and errors. Usage: python experiments/service_load.py
[--clients 50] [--requests 20]"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20, help="per client")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "joulecast.cli", "serve", "--port", str(port)],
                               env={**os.environ, "JOULECAST_API_KEY": ""}, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=2)
            break
        except OSError:
            time.sleep(0.3)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        for i in range(args.requests):  # a distinct configuration per request: no cache answers
            body = json.dumps({"model": "llama-3-8b", "gpu": "h100-sxm", "batch": 1 + index, "seq": 128 + 8 * i})
            request = urllib.request.Request(f"{base}/v1/estimate", data=body.encode(),
                                             headers={"Content-Type": "application/json"})
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    ok = response.status == 200 and json.loads(response.read())["energy_j"] > 0
            except Exception as exc:  # counted, never raised: the test reports what failed
                ok, reason = False, f"{type(exc).__name__}: {exc}"
            with lock:
                latencies.append(time.perf_counter() - start)
                if not ok:
                    errors.append(locals().get("reason", "bad response"))

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    process.terminate()
    process.wait(timeout=30)
    p50, p99 = np.percentile(np.array(latencies) * 1e3, [50, 99])
    print(f"{len(latencies):,} requests from {args.clients} concurrent clients on 127.0.0.1: p50 {p50:.1f} ms, "
          f"p99 {p99:.1f} ms, {len(latencies) / elapsed:,.0f} requests/s, {len(errors)} errors"
          + (f" (first: {errors[0]})" if errors else ""))


if __name__ == "__main__":
    main()
