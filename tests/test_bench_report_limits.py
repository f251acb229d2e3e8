"""The report's limits and marks: implausible numbers, huge repeat counts, SGLang's default output
(no --max-concurrency), and each arm's answer check from run.json (sglang_bench_report)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import tree_digest
from test_bench_report import OFF, ON, copy_run, table

from ansible.module_utils.sglang_bench_render import render_markdown, render_plot  # noqa: E402
from ansible.module_utils.sglang_bench_runs import ReportError, level_summary, read_runs  # noqa: E402


# --- implausible numbers, huge repeat counts, SGLang's default (no --max-concurrency) ------------


@pytest.mark.parametrize(("key", "value", "unit"), [("total_throughput", 1e308, "tok/s"),
                                                    ("output_throughput", 2e8, "tok/s"),
                                                    ("p99_itl_ms", 1e12, "ms")])
def test_an_implausible_number_is_refused_naming_the_bound(tmp_path, key, value, unit):
    run = copy_run(OFF, tmp_path / "a")
    lines = (run / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record[key] = value
    lines[1] = json.dumps(record)
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    before = tree_digest(tmp_path)
    with pytest.raises(ReportError) as info:
        read_runs([str(run), str(ON)])
    assert str(info.value) == (f"{run / 'results.jsonl'}:2: {key} is {value:.6g}; expected at most "
                               f"{1e8 if unit == 'tok/s' else 1e9:g} {unit}, a plausible benchmark result "
                               "(is the file SGLang's own output?)")
    assert tree_digest(tmp_path) == before


def test_a_huge_repeat_count_gives_a_count_and_the_first_and_last_line(tmp_path):
    run = copy_run(OFF, tmp_path / "a")
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text("\n".join(lines * 2000) + "\n")
    markdown = render_markdown(read_runs([str(run)]))
    notes = [line for line in markdown.splitlines() if line.startswith("- ")]
    count = len(lines)
    assert notes == ["- autotune-off: results.jsonl has more than one line for concurrency " + ", ".join(
        f"{json.loads(line)['max_concurrency']} (2000 lines, first {i + 1}, last {i + 1 + count * 1999})"
        for i, line in sorted(enumerate(lines), key=lambda item: json.loads(item[1])["max_concurrency"]))
        + "; the last line of each is reported"]
    assert len(markdown) < 4000


def test_sglang_default_output_without_a_cap_is_reported_as_unbounded(tmp_path):
    run = copy_run(OFF, tmp_path / "a")
    lines = (run / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    record["max_concurrency"] = None
    (run / "results.jsonl").write_text("\n".join(lines + [json.dumps(record)]) + "\n")
    runs = read_runs([str(run), str(ON)])
    markdown = render_markdown(runs)
    rows = table(markdown)
    assert rows[-2][:3] == ["unbounded", "autotune-off", f"{record['total_throughput']:.1f}"]
    assert rows[-1][:3] == ["unbounded", "autotune-on", "not run at this concurrency"]
    assert "Concurrency unbounded: the benchmark ran without --max-concurrency (SGLang's default)" in markdown
    assert "- concurrency unbounded: only in autotune-off" in markdown
    assert render_plot(runs)[:8] == b"\x89PNG\r\n\x1a\n"
    assert level_summary(run, 0).startswith("concurrency unbounded: ")



# --- each arm's answer check (run.json's answers, from the sglang_answers role) -------------------


def with_answers(run: Path, answers) -> Path:
    meta = json.loads((run / "run.json").read_text())
    meta["answers"] = answers
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_an_arm_with_corrupt_answers_is_marked_and_never_a_gain(tmp_path):
    off = with_answers(copy_run(OFF, tmp_path / "off"), {"passed": True, "classes": {}, "samples": 96})
    on = with_answers(copy_run(ON, tmp_path / "on"), {"passed": False, "classes": {"degenerate_run": 7, "wrong": 2,
                                                                                    "loop": 0}, "samples": 96})
    markdown = render_markdown(read_runs([str(off), str(on)]))
    assert ("Answers: `autotune-off` passed (96 answers checked); `autotune-on` FAILED: degenerate\\_run 7, "
            "wrong 2 of 96 answers. A run with corrupt answers is marked; its throughput never counts as a "
            "gain.") in markdown
    rows = [row for row in table(markdown) if row[1].startswith("autotune-on")]
    assert rows and all(row[1] == "autotune-on (corrupt answers)" for row in rows)
    assert all(row[-1] == "not counted: corrupt answers" for row in rows), rows
    assert not any(re.fullmatch(r"[0-9.]+", row[-1]) for row in rows)


def test_a_base_with_corrupt_answers_counts_no_ratio(tmp_path):
    off = with_answers(copy_run(OFF, tmp_path / "off"), {"passed": False, "classes": {"empty": 1}, "samples": 96})
    markdown = render_markdown(read_runs([str(off), str(ON)]))
    rows = [row for row in table(markdown) if row[1] == "autotune-on"]
    assert rows and all(row[-1] == "not counted: the base's answers are corrupt" for row in rows)
    assert "`autotune-on` not checked" in markdown


def test_runs_without_answers_read_as_before():
    markdown = render_markdown(read_runs([str(OFF), str(ON)]))
    assert "Answers:" not in markdown and "corrupt" not in markdown


@pytest.mark.parametrize(("answers", "field"), [
    ("passed", "answers is a JSON str"),
    ({"passed": "yes", "classes": {}, "samples": 96}, 'answers.passed is "yes"'),
    ({"passed": True, "classes": {}, "samples": -1}, "answers.samples is -1"),
    ({"passed": True, "classes": {"wrong": "2"}, "samples": 96}, 'answers.classes is {"wrong": "2"}'),
])
def test_a_malformed_answers_object_is_named(tmp_path, answers, field):
    run = with_answers(copy_run(ON, tmp_path / "on"), answers)
    before = tree_digest(tmp_path)
    with pytest.raises(ReportError) as info:
        read_runs([str(OFF), str(run)])
    assert str(info.value) == (f"{run / 'run.json'}: {field}; expected {{passed: true|false, classes: "
                               "{CLASS: COUNT}, samples: N} from the sglang_answers role, or no answers key")
    assert tree_digest(tmp_path) == before
