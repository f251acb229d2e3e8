"""bench_report.yml on input SGLang writes but the report once refused or printed in full."""

from __future__ import annotations

import json
import shutil

from test_playbook_bench import FIXTURES, report


def test_report_playbook_takes_sglang_default_output_as_unbounded(tmp_path):
    """`python -m sglang.bench_serving` without --max-concurrency writes max_concurrency null."""
    private, out = tmp_path / "runner", tmp_path / "out"
    private.mkdir()
    default = tmp_path / "default"
    shutil.copytree(FIXTURES / "runs" / "autotune-on", default)
    lines = (default / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    records[-1]["max_concurrency"] = None
    (default / "results.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")
    run = report(private, f"{FIXTURES / 'runs' / 'autotune-off'},{default}", out)
    assert run.status == "successful", run.failures
    text = (out / "report.md").read_text()
    assert f"| unbounded | autotune-on | {records[-1]['total_throughput']:.1f} |" in text
    assert "Concurrency unbounded: the benchmark ran without --max-concurrency" in text


def test_report_playbook_refuses_an_implausible_number_and_writes_nothing(tmp_path):
    private, out = tmp_path / "runner", tmp_path / "out"
    private.mkdir()
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURES / "runs" / "autotune-on", bad)
    records = [json.loads(line) for line in (bad / "results.jsonl").read_text().splitlines()]
    records[0]["total_throughput"] = 1e308
    (bad / "results.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")
    run = report(private, f"{FIXTURES / 'runs' / 'autotune-off'},{bad}", out)
    assert run.status == "failed"
    message = " ".join(run.failures)
    assert f"{bad / 'results.jsonl'}:1: total_throughput is 1e+308; expected at most 1e+08 tok/s" in message
    assert "Nothing was written" in message and not out.exists()
