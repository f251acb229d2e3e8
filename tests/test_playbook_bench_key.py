"""The benchmark reaches a server that has an API key, and never prints the key.

On the lent H200 SGLang's benchmark got 401 on /v1/models from a keyed server until OPENAI_API_KEY
was set (tests/fixtures/real-h200/); the stand-in benchmark of test_playbook_bench refuses the same
way unless OPENAI_API_KEY is the key its config names.
"""

from __future__ import annotations

import json

from test_playbook_bench import bench, box, server  # noqa: F401  (the benchmark's stand-in box and server)

KEY = "sk-bench-key-5f1e0c"


def test_the_benchmark_sends_the_servers_key_and_never_prints_it(box, server):  # noqa: F811
    config = json.loads(box["config"].read_text())
    box["config"].write_text(json.dumps({**config, "api_key": KEY}))
    refused = bench(box, server, "-e", "sglang_bench_compare=none")
    assert refused.rc != 0   # without the key, as the real benchmark against a keyed server
    done = bench(box, server, "-e", "sglang_bench_compare=none", "-e", f"sglang_server_api_key={KEY}", "-vvv")
    assert done.rc == 0, done.stdout[-3000:]
    assert KEY not in done.stdout
    assert (box["runs"]).is_dir() and any(box["runs"].rglob("results.jsonl"))
