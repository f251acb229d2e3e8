"""The project's readers against what a real SGLang 0.5.16 server said on a lent H200.

tests/fixtures/real-h200/ holds the real output of scripts/gpu-run/device.sh (2026-12-02,
tiny random-weight Qwen3-MoE, TP 1; docs/testing.md says how it was made): the logs of three
starts of the unit the role rendered, one for each autotune gate state, a start to readiness,
the units themselves, the benchmark's results.jsonl and power samples, the cache tree the server
made and greedy answers of the shipped prompts. The logs stand in for journald.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from conftest import REPO, load_file

sys.path.insert(0, str(REPO / "scripts" / "gpu-run"))
import launch_unit  # noqa: E402  (the run's own ExecStart reader)

from ansible.module_utils.sglang_bench_render import render_markdown  # noqa: E402
from ansible.module_utils.sglang_bench_runs import read_run  # noqa: E402
from ansible.module_utils.sglang_cache_fleet import sm_name  # noqa: E402

REAL = REPO / "tests" / "fixtures" / "real-h200"
CACHE_DIR = "/tmp/gpu-run/cache"  # SGLANG_CACHE_DIR on the device (scripts/gpu-run/tiny.yml)

_journal = load_file(REPO / "roles" / "sglang_server" / "filter_plugins" / "sglang_journal.py", "sglang_journal_real")

LOGS = {
    "A": "autotune-A-commented-then-true.log",    # entry commented by hand, autotune=true
    "B": "autotune-B-commented-then-false.log",   # entry commented by hand, autotune=false
    "C": "autotune-C-shipped-then-false.log",     # file as shipped, autotune=false
}


def log(state: str) -> str:
    return (REAL / LOGS[state]).read_text(encoding="utf-8")


def argv(unit: str) -> list[str]:
    return launch_unit.split_words(launch_unit.exec_start((REAL / "units" / unit).read_text(encoding="utf-8")))


def test_the_role_restored_the_entry_and_the_real_server_ran_autotune():
    evidence = _journal.autotune_evidence(log("A"), 1, True)
    # The line came 25 s after start; FlashInfer then JIT-compiles fused_moe_90 for far longer
    # than a lease, so no "completed" line: the proof rightly does not call that proven.
    assert (evidence["running"], evidence["completed"]) == (1, 0)
    assert not evidence["ok"]
    assert "--disable-flashinfer-autotune" not in argv("A.service")


@pytest.mark.parametrize("state", ["B", "C"])
def test_autotune_false_real_server_printed_no_autotune_line(state):
    text = log(state)
    # The gate runs while the model runner starts, before the HTTP server: a log that reached
    # Uvicorn without the line has passed it (in A the line came before this point).
    assert "Uvicorn running" in text
    assert _journal.autotune_evidence(text, 1, False)["ok"]
    assert not _journal.autotune_evidence(text, 1, True)["ok"]
    assert "--disable-flashinfer-autotune" in argv(f"{state}.service")


def test_the_line_comes_before_the_http_server_in_a():
    text = log("A")
    assert "Running FlashInfer autotune with cache:" in text
    assert "Uvicorn running" not in text.split("Running FlashInfer autotune", 1)[0]


def test_b_and_c_ran_the_same_command_line():
    assert argv("B.service") == argv("C.service")


def test_cache_source_names_the_tree_the_real_server_made():
    source = _journal.autotune_cache_source(log("A"), CACHE_DIR)
    assert (source["found"], source["flashinfer"], source["sm"]) == (True, "0.6.14", "sm90")
    tree = (REAL / "cache-tree.txt").read_text(encoding="utf-8").split()
    assert "./" + source["dir"][len(CACHE_DIR) + 1:] in tree
    # SGLang makes the key directory when the line is logged; the rank file comes only when
    # tuning finishes, which it did not here: nothing for the fleet to hand in.
    assert not [name for name in tree if name.endswith(".json")]
    assert _journal.autotune_cache_source(log("B"), CACHE_DIR)["found"] is False


def test_sm_from_the_real_nvidia_smi_matches_the_real_path():
    caps = [line.split(", ")[1] for line in (REAL / "env.txt").read_text().splitlines()[1:2]]
    assert sm_name(caps) == ("sm90", "nvidia-smi")
    assert "/sm90/" in log("A")


def test_the_real_server_read_the_api_key_from_the_config_file_and_logs_it():
    words = argv("serve.service")
    assert words[words.index("--config") + 1] == "/etc/sglang/sglang.secrets.yaml"
    assert not any("gpu-run-key" in word for word in words)
    text = (REAL / "serve-to-ready.log").read_text(encoding="utf-8")
    # SGLang prints server_args with the key in clear: the journal must be masked when shown.
    assert "api_key='gpu-run-key-0123456789'" in text
    assert "The server is fired up and ready to roll!" in text
    summary = (REAL / "summary.txt").read_text(encoding="utf-8")
    assert "GET /health_generate without key: 200" in summary
    assert "GET /v1/models without key: 401, with key: 200" in summary


def test_bench_report_renders_from_the_real_results(tmp_path):
    run = read_run(REAL / "bench")
    assert sorted(run.levels) == [4, 16]
    for level in run.levels.values():
        assert level.total_throughput > 0 and level.p99_ttft_ms > 0
        assert level.power_w is not None and level.power_w > 50  # nvidia-smi sampled the H200
    table = render_markdown([run])
    assert re.search(r"\|\s*4\s*\|", table)
    assert re.search(r"\|\s*16\s*\|", table)


def drift(first: dict, second: dict, words: int) -> float:
    """Share of answers whose first WORDS words differ (the answer check's drift rule)."""
    ids = sorted(first["answers"])
    parted = sum(1 for i in ids
                 if first["answers"][i]["text"].split()[:words] != second["answers"][i]["text"].split()[:words])
    return parted / len(ids)


def test_greedy_answers_drift_on_the_real_batching_engine():
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((REAL / "answers").glob("raw-*.json"))]
    assert [r["concurrency"] for r in runs] == [8, 32, 32, 96]
    assert all(len(r["answers"]) == 96 for r in runs)
    # Same concurrency twice: 5 of 96 part within 12 words; across concurrencies 22 to 27.
    # Random weights give near-flat logits, so this is an upper bound for a trained model.
    assert drift(runs[1], runs[2], 12) == pytest.approx(5 / 96)
    assert [round(drift(runs[0], r, 12) * 96) for r in runs[1:]] == [22, 23, 27]
