"""Stand-in for SGLang's serving benchmark (sglang/benchmark/serving.py), for the fleet test only.

make_wheel.py --slim puts it in the slimmed wheel in place of the real one, whose dependencies
(aiohttp, numpy, transformers) the slim install has not. It takes the flags the sglang_bench role
passes, sends --num-prompts POST /generate requests to the server with at most
--max-concurrency in flight, and appends one line to --output-file with the keys SGLang's
benchmark writes (the ones sglang_bench reads among them), measured here: duration, throughput
from the asked token counts, and latencies. The stand-in server answers without streaming, so
TTFT is the time to its whole answer. Run with SGLANG_STANDIN=1 (the .pth then registers the
sglang package without importing its dependencies).
"""

import argparse
import json
import math
import threading
import time
import urllib.request


def percentile(values, pct):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))]


def main():
    parser = argparse.ArgumentParser(description="stand-in serving benchmark")
    parser.add_argument("--backend", default="sglang", choices=["sglang", "sglang-oai"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model", default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--dataset-name", default="random-ids", choices=["random", "random-ids"])
    parser.add_argument("--random-input-len", type=int, default=1024)
    parser.add_argument("--random-output-len", type=int, default=1024)
    parser.add_argument("--random-range-ratio", type=float, default=1.0)
    parser.add_argument("--num-prompts", type=int, default=10)
    parser.add_argument("--max-concurrency", type=int, default=1)
    parser.add_argument("--output-file", required=True)
    parser.add_argument("--disable-tqdm", action="store_true")
    args = parser.parse_args()

    url = f"http://{args.host}:{args.port}/generate"
    body = json.dumps({"text": "stand-in benchmark prompt", "sampling_params": {
        "max_new_tokens": args.random_output_len, "temperature": 0}}).encode()
    pending = list(range(args.num_prompts))
    lock = threading.Lock()
    latencies, failures = [], []

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                pending.pop()
            started = time.monotonic()
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    answer.read()
                with lock:
                    latencies.append(time.monotonic() - started)
            except OSError as exc:
                with lock:
                    failures.append(str(exc))

    began = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(args.max_concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    duration = time.monotonic() - began
    if failures or not latencies:
        print(f"stand-in benchmark: {len(failures)} requests failed: {failures[:3]}")
        return 1
    done = len(latencies)
    tokens_in, tokens_out = done * args.random_input_len, done * args.random_output_len
    ttft = [s * 1000 for s in latencies]
    itl = [s * 1000 / args.random_output_len for s in latencies]
    record = {
        "tag": "stand-in", "backend": args.backend, "dataset_name": args.dataset_name, "request_rate": math.inf,
        "max_concurrency": args.max_concurrency, "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len, "random_range_ratio": args.random_range_ratio,
        "duration": round(duration, 4), "completed": done, "total_input_tokens": tokens_in,
        "total_output_tokens": tokens_out, "request_throughput": round(done / duration, 4),
        "input_throughput": round(tokens_in / duration, 2), "output_throughput": round(tokens_out / duration, 2),
        "total_throughput": round((tokens_in + tokens_out) / duration, 2),
        "mean_e2e_latency_ms": round(sum(ttft) / done, 2), "p99_e2e_latency_ms": round(percentile(ttft, 99), 2),
        "mean_ttft_ms": round(sum(ttft) / done, 2), "median_ttft_ms": round(percentile(ttft, 50), 2),
        "p99_ttft_ms": round(percentile(ttft, 99), 2), "mean_itl_ms": round(sum(itl) / done, 3),
        "p99_itl_ms": round(percentile(itl, 99), 3), "stand_in": True,
    }
    with open(args.output_file, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
    print(f"Total token throughput (tok/s): {record['total_throughput']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
