"""Report logic on recorded runs in SGLang's own JSONL format (sglang_bench_report)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import sys
from pathlib import Path

import pytest
from bench_keys import result_keys
from conftest import REPO, tree_digest

from ansible.module_utils.sglang_bench_output import OutputError, dir_problem, write_all  # noqa: E402
from ansible.module_utils.sglang_bench_render import (  # noqa: E402
    md_code, md_text, plot_label, render_markdown, render_plot,
)
from ansible.module_utils.sglang_bench_runs import (  # noqa: E402
    REQUIRED_KEYS, ReportError, level_summary, parse_power, read_runs,
)

RUNS = REPO / "tests" / "fixtures" / "bench" / "runs"
NVIDIA = REPO / "tests" / "fixtures" / "bench" / "nvidia-smi"
OFF, ON = RUNS / "autotune-off", RUNS / "autotune-on"


def copy_run(src: Path, dest: Path, keep: set[int] | None = None, power: bool = True, label: str | None = None) -> Path:
    """A copy of a recorded run, optionally with fewer levels, no power or another label."""
    dest.mkdir(parents=True)
    lines = [line for line in (src / "results.jsonl").read_text().splitlines()
             if keep is None or json.loads(line)["max_concurrency"] in keep]
    (dest / "results.jsonl").write_text("\n".join(lines) + "\n")
    if power:
        for csv in src.glob("power-*.csv"):
            shutil.copy(csv, dest / csv.name)
    meta = json.loads((src / "run.json").read_text())
    if label is not None:
        meta["label"] = label
    (dest / "run.json").write_text(json.dumps(meta))
    return dest


def table(markdown: str) -> list[list[str]]:
    """The table's body rows, cells stripped."""
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| Concurrency")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


# --- the recorded data has SGLang's own shape --------------------------------------------


@pytest.mark.parametrize("version", ["0.5.8", "0.5.12", "0.5.23"])
def test_benchmark_writes_the_keys_the_report_reads(version):
    keys = result_keys(version)
    assert set(REQUIRED_KEYS) <= set(keys), set(REQUIRED_KEYS) - set(keys)


def test_recorded_lines_have_exactly_the_0_5_12_keys():
    keys = result_keys("0.5.12")
    for run in (OFF, ON):
        for line in (run / "results.jsonl").read_text().splitlines():
            assert list(json.loads(line)) == keys


# --- tables --------------------------------------------------------------------------------


def test_two_runs_give_the_right_numbers_and_ratios():
    markdown = render_markdown(read_runs([str(OFF), str(ON)]))
    assert "| Concurrency | Run | Total tok/s | Output tok/s | Mean TTFT ms | P99 TTFT ms | P99 ITL ms | " \
           "Mean GPU power W | Total vs autotune-off |" in markdown
    rows = table(markdown)
    assert rows == [
        ["64", "autotune-off", "640.0", "320.0", "2210.0", "4150.0", "181.00", "232", ""],
        ["64", "autotune-on", "1130.0", "565.0", "1190.0", "2240.0", "102.00", "318", "1.77"],
        ["256", "autotune-off", "862.0", "431.0", "9800.0", "17900.0", "590.00", "248", ""],
        ["256", "autotune-on", "1950.0", "975.0", "4310.0", "8120.0", "261.00", "402", "2.26"],
        ["512", "autotune-off", "879.0", "439.5", "21500.0", "40200.0", "1190.00", "251", ""],
        ["512", "autotune-on", "2800.0", "1400.0", "7960.0", "14800.0", "372.00", "455", "3.19"],
        ["1024", "autotune-off", "884.0", "442.0", "46100.0", "88300.0", "2380.00", "252", ""],
        ["1024", "autotune-on", "3740.0", "1870.0", "15400.0", "28900.0", "556.00", "497", "4.23"],
    ]
    assert "Notes:" not in markdown


def test_one_run_has_no_ratios(tmp_path):
    markdown = render_markdown(read_runs([str(ON)]))
    assert "vs" not in markdown.split("\n| Concurrency")[1].splitlines()[0]
    assert "Ratios" not in markdown
    rows = table(markdown)
    assert [row[:3] for row in rows] == [["64", "autotune-on", "1130.0"], ["256", "autotune-on", "1950.0"],
                                         ["512", "autotune-on", "2800.0"], ["1024", "autotune-on", "3740.0"]]
    assert all(len(row) == 8 for row in rows)


def test_three_runs_compare_each_to_the_first(tmp_path):
    third = copy_run(ON, tmp_path / "nightly-1201", label="nightly")
    text = (third / "results.jsonl").read_text().replace('"total_throughput": 3740.0', '"total_throughput": 4420.0')
    (third / "results.jsonl").write_text(text)
    markdown = render_markdown(read_runs([str(OFF), str(ON), str(third)]))
    rows = {(row[0], row[1]): row for row in table(markdown)}
    assert rows[("1024", "autotune-on")][-1] == "4.23"
    assert rows[("1024", "nightly")][-1] == "5.00"  # 4420 / 884
    assert rows[("64", "nightly")][-1] == "1.77"
    assert rows[("1024", "autotune-off")][-1] == ""


def test_rows_present_in_one_run_only_say_so(tmp_path):
    a = copy_run(OFF, tmp_path / "a", keep={64, 256, 512})
    b = copy_run(ON, tmp_path / "b", keep={256, 512, 1024})
    markdown = render_markdown(read_runs([str(a), str(b)]))
    rows = {(row[0], row[1]): row for row in table(markdown)}
    assert rows[("64", "autotune-on")][2] == "not run at this concurrency"
    assert rows[("64", "autotune-on")][-1] == "-"
    assert rows[("1024", "autotune-off")][2] == "not run at this concurrency"
    assert rows[("1024", "autotune-on")][-1] == "-"  # no base to divide by
    assert rows[("256", "autotune-on")][-1] == "2.26"
    assert "- concurrency 64: only in autotune-off" in markdown
    assert "- concurrency 1024: only in autotune-on" in markdown


def test_power_absent_gives_no_power_column(tmp_path):
    a = copy_run(OFF, tmp_path / "a", power=False)
    b = copy_run(ON, tmp_path / "b", power=False)
    runs = read_runs([str(a), str(b)])
    markdown = render_markdown(runs)
    assert "GPU power" not in markdown and "Power:" not in markdown
    assert table(markdown)[1] == ["64", "autotune-on", "1130.0", "565.0", "1190.0", "2240.0", "102.00", "1.77"]
    assert render_plot(runs).startswith(b"\x89PNG")


def test_power_in_one_run_only(tmp_path):
    a = copy_run(OFF, tmp_path / "a", power=False)
    rows = table(render_markdown(read_runs([str(a), str(ON)])))
    assert rows[0][7] == "not sampled" and rows[1][7] == "318"


def test_label_falls_back_to_the_directory_name(tmp_path):
    a = copy_run(OFF, tmp_path / "before-20261130T140000Z")
    (a / "run.json").unlink()
    assert read_runs([str(a)])[0].label == "before-20261130T140000Z"


def test_same_label_twice_is_told_apart(tmp_path):
    a = copy_run(ON, tmp_path / "first")
    b = copy_run(ON, tmp_path / "second")
    assert [run.label for run in read_runs([str(a), str(b)])] == ["autotune-on (first)", "autotune-on (second)"]


# --- power samples ---------------------------------------------------------------------------


def test_real_nvidia_smi_samples():
    sample = parse_power(NVIDIA / "h200-2gpu-idle-power.csv")
    assert sample["gpus"] == 2
    assert sample["power_w"] == pytest.approx(77.8925, abs=1e-4)
    assert sample["power_max_w"] == pytest.approx(78.37)
    assert sample["utilization_pct"] == 0


def test_a_header_line_is_refused():
    with pytest.raises(ReportError, match=r"h200-2gpu-power-with-header.csv:1: GPU index is 'index'"):
        parse_power(NVIDIA / "h200-2gpu-power-with-header.csv")


def test_not_supported_readings_are_skipped(tmp_path):
    csv = tmp_path / "power-64.csv"
    csv.write_text("2026/11/30 14:50:34.069, 0, [N/A], 0, 0\n2026/11/30 14:50:34.075, 1, 300.00, 90, 10\n")
    assert parse_power(csv)["power_w"] == 300.0


# --- malformed input: file and line named ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "pattern"),
    [
        ("not json", '{"max_concurrency": 64}\nnot json\n', r"results.jsonl:2: not JSON"),
        ("missing key", None, r"results.jsonl:3: missing p99_itl_ms"),
        ("string number", None, r"results.jsonl:3: total_throughput is \"fast\""),
        ("array", "[1, 2]\n", r"results.jsonl:1: a JSON list; expected an object"),
        ("empty", "\n", r"results.jsonl: no results"),
    ],
)
def test_malformed_results_name_file_and_line(tmp_path, name, content, pattern):
    run = copy_run(OFF, tmp_path / "a")
    lines = (run / "results.jsonl").read_text().splitlines()
    if name == "missing key":
        record = json.loads(lines[2])
        del record["p99_itl_ms"]
        lines[2] = json.dumps(record)
        content = "\n".join(lines) + "\n"
    if name == "string number":
        record = json.loads(lines[2])
        record["total_throughput"] = "fast"
        lines[2] = json.dumps(record)
        content = "\n".join(lines) + "\n"
    if name == "not json":
        content = lines[0] + "\nnot json\n"
    (run / "results.jsonl").write_text(content)
    with pytest.raises(ReportError, match=pattern):
        read_runs([str(run), str(ON)])


def test_malformed_power_names_file_and_line(tmp_path):
    run = copy_run(OFF, tmp_path / "a")
    csv = run / "power-256.csv"
    csv.write_text(csv.read_text().replace("248.", "lots", 1).replace("lots", "2x8.", 1))
    with pytest.raises(ReportError, match=re.escape(f"{csv}:") + r"\d+: power.draw is '2x8"):
        read_runs([str(run)])


def test_missing_directory_and_missing_results(tmp_path):
    with pytest.raises(ReportError, match=re.escape(f"{tmp_path / 'nope'}: no such run directory")):
        read_runs([str(OFF), str(tmp_path / "nope")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match=re.escape(f"{tmp_path / 'empty' / 'results.jsonl'}: missing")):
        read_runs([str(tmp_path / "empty")])


# --- plot and progress line --------------------------------------------------------------------


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_is_a_real_png_of_sensible_size():
    data = render_plot(read_runs([str(OFF), str(ON)]))
    width, height = png_size(data)
    assert (width, height) == (800, 700)
    assert 20_000 < len(data) < 300_000
    assert data == render_plot(read_runs([str(OFF), str(ON)]))  # same runs, same bytes


def test_progress_line():
    assert level_summary(ON, 1024) == "concurrency 1024: 3740.0 tok/s total, p99 TTFT 28900.0 ms, mean power 497 W per GPU"
    with pytest.raises(ReportError, match="no line for concurrency 2048"):
        level_summary(ON, 2048)


# --- the README's example, made from the recorded runs --------------------------------------------

EXAMPLE = REPO / "docs" / "bench-example"
EXAMPLE_TITLE = "EXAMPLE DATA (synthetic numbers): SGLang serving benchmark"


def test_readme_example_is_made_from_the_recorded_runs(monkeypatch):
    """UPDATE_BENCH_EXAMPLE=1 rewrites docs/bench-example/ from tests/fixtures/bench/runs."""
    import os

    monkeypatch.chdir(REPO)
    runs = read_runs(["tests/fixtures/bench/runs/autotune-off", "tests/fixtures/bench/runs/autotune-on"])
    markdown, plot = render_markdown(runs), render_plot(runs, title=EXAMPLE_TITLE)
    if os.environ.get("UPDATE_BENCH_EXAMPLE") == "1":
        EXAMPLE.mkdir(parents=True, exist_ok=True)
        (EXAMPLE / "report.md").write_text(markdown)
        (EXAMPLE / "throughput.png").write_bytes(plot)
    assert (EXAMPLE / "report.md").read_text() == markdown
    assert png_size((EXAMPLE / "throughput.png").read_bytes()) == png_size(plot)
    readme = (REPO / "README.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert len(rows) == 9
    for row in rows:
        assert row in readme.splitlines(), row


def test_real_sampler_file():
    """What the role's own sampler command wrote with -f on a real H200 before it was stopped."""
    sample = parse_power(NVIDIA / "h200-1gpu-sampler-file.csv")
    assert sample["gpus"] == 1
    assert sample["power_w"] == pytest.approx((118.94 + 80.68 + 80.56 + 80.56) / 4)
    assert sample["power_max_w"] == 118.94


# --- negative numbers are refused as NaN is ----------------------------------------------------


def set_key(run: Path, line: int, key: str, value) -> None:
    lines = (run / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[line])
    record[key] = value
    lines[line] = json.dumps(record)
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("key", REQUIRED_KEYS[1:])
@pytest.mark.parametrize("value", [-1, -0.001, -1e300])
def test_a_negative_throughput_or_latency_is_refused(tmp_path, key, value):
    run = copy_run(OFF, tmp_path / "a")
    set_key(run, 1, key, value)
    with pytest.raises(ReportError, match=re.escape(f"results.jsonl:2: {key} is {json.dumps(value)}; "
                                                    "expected a finite number of 0 or more")):
        read_runs([str(run)])


@pytest.mark.parametrize(("column", "name"), [(2, "power.draw"), (3, "utilization.gpu"), (4, "memory.used")])
@pytest.mark.parametrize("value", ["-1", "-248.50", "-0.01"])
def test_a_negative_power_sample_is_refused(tmp_path, column, name, value):
    run = copy_run(OFF, tmp_path / "a")
    csv = run / "power-256.csv"
    lines = csv.read_text().splitlines()
    fields = lines[2].split(", ")
    fields[column] = value
    lines[2] = ", ".join(fields)
    csv.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReportError, match=re.escape(f"{csv}:3: {name} is '{value}'; expected a finite number of 0 or more")):
        read_runs([str(run)])


def test_zero_is_a_number_of_0_or_more(tmp_path):
    run = copy_run(OFF, tmp_path / "a")
    set_key(run, 0, "p99_itl_ms", 0)
    assert read_runs([str(run)])[0].levels[64].p99_itl_ms == 0


# --- labels escaped for Markdown -----------------------------------------------------------------


HOSTILE_LABELS = ["a|b", "x\n# heading", "`code`", "*bold*", "<script>alert(1)</script>", "- item", "1. first",
                  "[link](http://x)", "a\\|b", "_under_", "tab\there", "cr\rhere", "ok\u2028line"]


@pytest.mark.parametrize("label", HOSTILE_LABELS)
def test_a_label_cannot_break_the_table_or_the_text(tmp_path, label):
    a = copy_run(OFF, tmp_path / "a", label=label)
    markdown = render_markdown(read_runs([str(a), str(ON)]))
    lines = markdown.splitlines()
    head = next(line for line in lines if line.startswith("| Concurrency"))
    body = [line for line in lines if line.startswith("| ") and line != head]
    cells = len(re.split(r"(?<!\\)\|", head))
    assert len(body) == 8 and all(len(re.split(r"(?<!\\)\|", row)) == cells for row in body), markdown
    assert md_text(label) in head and all(md_text(label) in row for row in body if "autotune-on" not in row)
    assert not any(line.startswith("#") for line in lines[1:]), markdown
    # Outside a code span no tag survives; inside one (the Runs line) it is literal text.
    assert "<script>" not in "\n".join([head, *body]) and "\r" not in markdown and "\u2028" not in markdown
    assert md_code(label) in lines[2]


@pytest.mark.parametrize(("text", "shown"), [
    ("a|b", r"a\|b"), ("x\n# h", r"x\\n\# h"), ("*b*", r"\*b\*"), ("- item", r"\- item"), ("1. one", r"1\. one"),
    ("<b>", r"\<b\>"), ("a_b", r"a\_b"), ("autotune-off", "autotune-off"), ("nightly 1201", "nightly 1201"),
])
def test_md_text(text, shown):
    assert md_text(text) == shown


@pytest.mark.parametrize(("text", "shown"), [
    ("autotune-on", "`autotune-on`"), ("a`b", "``a`b``"), ("`x`", "`` `x` ``"), ("a\nb", "`a\\nb`"),
])
def test_md_code(text, shown):
    assert md_code(text) == shown


@pytest.mark.parametrize("label", ["$\\frac{", "cost $5 and $", "_hidden", "a\nb"])
def test_a_label_cannot_break_the_plot(tmp_path, label):
    a = copy_run(OFF, tmp_path / "a", label=label)
    assert render_plot(read_runs([str(a), str(ON)])).startswith(b"\x89PNG")
    assert "\n" not in plot_label(label) and not plot_label(label).startswith("_")


# --- a level measured more than once: one note per run ----------------------------------------------


def repeat_lines(run: Path, *indexes: int) -> None:
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text("\n".join(lines + [lines[i] for i in indexes]) + "\n")


def test_repeated_concurrencies_get_one_note_per_run(tmp_path):
    a = copy_run(OFF, tmp_path / "a")
    b = copy_run(ON, tmp_path / "b")
    repeat_lines(a, 0, 1, 3, 3)
    repeat_lines(b, 2)
    markdown = render_markdown(read_runs([str(a), str(b)]))
    notes = [line for line in markdown.splitlines() if line.startswith("- ")]
    assert notes == [
        "- autotune-off: results.jsonl has more than one line for concurrency 64 (lines 1, 5), "
        "256 (lines 2, 6), 1024 (lines 4, 7, 8); the last line of each is reported",
        "- autotune-on: results.jsonl has more than one line for concurrency 512 (lines 3, 5); "
        "the last line of each is reported",
    ]
    assert len(table(markdown)) == 8


def test_no_repeat_no_note():
    assert "Notes:" not in render_markdown(read_runs([str(OFF), str(ON)]))


# --- a FIFO, directory or device where a file is read --------------------------------------------


@pytest.mark.parametrize("name", ["results.jsonl", "power-64.csv", "run.json"])
@pytest.mark.parametrize(("make", "kind"), [
    (os.mkfifo, "FIFO (named pipe)"), (os.mkdir, "directory"),
    (lambda path: os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3)), "character device"),
])
def test_a_fifo_directory_or_device_where_a_file_is_read_is_refused(tmp_path, name, make, kind):
    run = copy_run(OFF, tmp_path / "a")
    (run / name).unlink()
    make(run / name)
    before = tree_digest(tmp_path)
    with pytest.raises(ReportError, match=re.escape(f"{run / name} is a {kind}; expected")):
        read_runs([str(run)])
    assert tree_digest(tmp_path) == before


# --- the output: checked first, both files written or neither ----------------------------------------


def _regular(path: Path) -> None:
    path.write_text("not a directory\n")


@pytest.mark.parametrize(("make", "target", "needle"), [
    (_regular, ".", "{out} is a regular file, not a directory"),
    (_regular, "deeper/out", "{out}/deeper/out cannot be created: {out} is a regular file, not a directory"),
    (os.mkfifo, ".", "{out} is a FIFO (named pipe), not a directory"),
    (lambda path: (path.mkdir(), (path / "report.md").mkdir()), ".", "{out}/report.md is a directory; expected a file"),
    (lambda path: (path.mkdir(), os.mkfifo(path / "throughput.png")), ".", "{out}/throughput.png is a FIFO"),
])
def test_dir_problem_names_the_path(tmp_path, make, target, needle):
    out = tmp_path / "out"
    make(out)
    problem = dir_problem(out / target if target != "." else out, ("report.md", "throughput.png"))
    assert problem is not None and problem.startswith(needle.format(out=out)), problem


def test_a_failed_write_leaves_no_temporary_and_says_what_was_replaced(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("old report\n")
    (out / "throughput.png").write_bytes(b"old png")
    before = tree_digest(out)
    real_fsync = os.fsync
    calls = []

    def full_on_second(descriptor):
        calls.append(descriptor)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", full_on_second)
    with pytest.raises(OutputError, match=re.escape(f"{out / 'throughput.png'}: cannot be written "
                                                    "(No space left on device); nothing was written")):
        write_all({out / "report.md": b"new report\n", out / "throughput.png": b"new png"})
    assert tree_digest(out) == before


