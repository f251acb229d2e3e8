"""Read and check recorded benchmark runs (sglang_bench_render.py turns them into the report).

A run directory holds what ``playbooks/bench.yml`` fetched: ``results.jsonl``
(SGLang's own ``--output-file`` lines, one per concurrency level),
``power-<concurrency>.csv`` (``nvidia-smi --query-gpu=timestamp,index,
power.draw,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1``
while that level ran) and ``run.json`` (label, install, server command line).

Everything is read and checked before anything is written: a bad file raises
:class:`ReportError` naming the file and the line.

Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

# Keys of the dict SGLang's serving benchmark appends to --output-file, the
# same from 0.5.8 to 0.5.23 (tests/test_bench_report.py reads them from the
# wheels).
REQUIRED_KEYS = (
    "max_concurrency",
    "total_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "p99_itl_ms",
)
# A result beyond these is no measurement (1e308 tok/s was once accepted and printed in full):
# tokens per second and milliseconds.
PLAUSIBLE_MAX = {"total_throughput": 1e8, "output_throughput": 1e8, "mean_ttft_ms": 1e9, "p99_ttft_ms": 1e9,
                 "p99_itl_ms": 1e9}
# SGLang's own default (no --max-concurrency) writes max_concurrency null: every request at once.
UNBOUNDED = 0
NOTE_LEVELS = 10  # concurrencies named in one repeats note; the rest are counted
POWER_FIELDS = 5  # timestamp, index, power.draw, utilization.gpu, memory.used
POWER_FILE_RE = re.compile(r"^power-(\d+)\.csv$")
# nvidia-smi writes these instead of a number for a GPU that cannot report.
NOT_A_READING = {"[N/A]", "[Not Supported]", "N/A", "[Unknown Error]"}


class ReportError(Exception):
    """Input that cannot be reported on; the message names the file and line."""


def read_text(path: Path, what: str) -> str:
    """A regular file's text; a directory, FIFO (which would hang) or device is refused naming it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise ReportError(f"{path}: missing; expected {what}") from None
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror}); expected {what}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise ReportError(f"{path} is a {_kind(mode)}; expected {what} (a regular file)")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            return handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror}); expected {what}") from None
    finally:
        os.close(descriptor)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


@dataclass
class Level:
    """One concurrency level of one run, from its JSONL line."""

    concurrency: int
    total_throughput: float
    output_throughput: float
    mean_ttft_ms: float
    p99_ttft_ms: float
    p99_itl_ms: float
    power_w: Optional[float] = None
    power_max_w: Optional[float] = None
    utilization_pct: Optional[float] = None
    gpus: int = 0


@dataclass
class Answers:
    """The answer check of a run (run.json's ``answers``, from the sglang_answers role)."""

    passed: bool
    classes: dict[str, int]
    samples: int

    def corrupt(self) -> str:
        """The classes found and their counts, e.g. 'degenerate_run 3, wrong 1' ('' when none)."""
        return ", ".join(f"{name} {count}" for name, count in sorted(self.classes.items()) if count)


@dataclass
class Run:
    """A run directory, read."""

    label: str
    directory: str
    levels: dict[int, Level] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    answers: Optional[Answers] = None

    @property
    def answers_failed(self) -> bool:
        return self.answers is not None and not self.answers.passed

    @property
    def power_sampled(self) -> bool:
        return any(level.power_w is not None for level in self.levels.values())


def concurrency_name(concurrency: int) -> str:
    return "unbounded" if concurrency == UNBOUNDED else str(concurrency)


def concurrency_order(concurrency: int) -> tuple[bool, int]:
    """Sort key: the bounded levels by size, the unbounded one last."""
    return concurrency == UNBOUNDED, concurrency


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ReportError(f"{where}: {key} is {json.dumps(value)}; expected a finite number of 0 or more")
    limit = PLAUSIBLE_MAX.get(key)
    if limit is not None and value > limit:
        unit = "tok/s" if key.endswith("throughput") else "ms"
        raise ReportError(f"{where}: {key} is {value:.6g}; expected at most {limit:g} {unit}, a plausible "
                          "benchmark result (is the file SGLang's own output?)")
    return float(value)


def parse_results(path: Path) -> tuple[dict[int, Level], dict[int, list[int]]]:
    """The levels of one results.jsonl, keyed by max_concurrency, and the lines of each level.

    A level measured more than once (SGLang appends) keeps its last line; the
    lines of each level say which were repeated.
    """
    levels: dict[int, Level] = {}
    lines: dict[int, list[int]] = {}
    text = read_text(path, "SGLang's JSONL written by --output-file")
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReportError(f"{where}: not JSON ({exc.msg}); expected one object per line") from None
        if not isinstance(record, dict):
            raise ReportError(f"{where}: a JSON {type(record).__name__}; expected an object")
        missing = [key for key in REQUIRED_KEYS if key not in record]
        if missing:
            raise ReportError(f"{where}: missing {', '.join(missing)}; is this SGLang's benchmark output?")
        concurrency = record["max_concurrency"]
        if concurrency is None:  # SGLang's default: no cap, every request at once
            concurrency = UNBOUNDED
        elif isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ReportError(f"{where}: max_concurrency is {json.dumps(concurrency)}; expected a positive "
                              "integer, or null for SGLang's default of no cap (--max-concurrency)")
        lines.setdefault(concurrency, []).append(lineno)
        levels[concurrency] = Level(concurrency, *(_number(record[key], where, key) for key in REQUIRED_KEYS[1:]))
    if not levels:
        raise ReportError(f"{path}: no results; expected one JSON line per concurrency level")
    return levels, lines


def _lines_of(numbers: list[int]) -> str:
    if len(numbers) <= 3:
        return f"lines {', '.join(map(str, numbers))}"
    return f"{len(numbers)} lines, first {numbers[0]}, last {numbers[-1]}"


def repeats_note(label: str, name: str, lines: dict[int, list[int]]) -> Optional[str]:
    """One note for every level a run measured more than once, or None; its size is bounded."""
    repeated = [f"{concurrency_name(concurrency)} ({_lines_of(numbers)})"
                for concurrency, numbers in sorted(lines.items(), key=lambda item: concurrency_order(item[0]))
                if len(numbers) > 1]
    if not repeated:
        return None
    more = len(repeated) - NOTE_LEVELS
    shown = ", ".join(repeated[:NOTE_LEVELS]) + (f" and {more} more" if more > 0 else "")
    return (f"{label}: {name} has more than one line for concurrency {shown}; "
            "the last line of each is reported")


def _reading(value: str, where: str, name: str) -> Optional[float]:
    value = value.strip()
    if value in NOT_A_READING:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ReportError(f"{where}: {name} is {value!r}; expected a number "
                          "(nvidia-smi --format=csv,noheader,nounits)") from None
    if not math.isfinite(number) or number < 0:
        raise ReportError(f"{where}: {name} is {value!r}; expected a finite number of 0 or more")
    return number


def parse_power(path: Path) -> dict[str, Any]:
    """Mean and max power per GPU, mean SM utilisation, and the GPU count of one CSV."""
    power: list[float] = []
    utilization: list[float] = []
    gpus: set[str] = set()
    for lineno, line in enumerate(read_text(path, "nvidia-smi's samples").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        fields = [part.strip() for part in line.split(",")]
        if len(fields) != POWER_FIELDS:
            raise ReportError(f"{where}: {len(fields)} fields; expected {POWER_FIELDS} "
                              "(timestamp, index, power.draw, utilization.gpu, memory.used)")
        if not fields[1].isdigit():
            raise ReportError(f"{where}: GPU index is {fields[1]!r}; expected a number "
                              "(a header line? sample with --format=csv,noheader,nounits)")
        gpus.add(fields[1])
        watts = _reading(fields[2], where, "power.draw")
        if watts is not None:
            power.append(watts)
        busy = _reading(fields[3], where, "utilization.gpu")
        if busy is not None:
            utilization.append(busy)
        _reading(fields[4], where, "memory.used")
    return {
        "power_w": sum(power) / len(power) if power else None,
        "power_max_w": max(power) if power else None,
        "utilization_pct": sum(utilization) / len(utilization) if utilization else None,
        "gpus": len(gpus),
    }


def parse_answers(value: Any, where: str) -> Optional[Answers]:
    """run.json's optional ``answers`` object: {passed: bool, classes: {class: count}, samples: int}."""
    if value is None:
        return None
    expected = ("expected {passed: true|false, classes: {CLASS: COUNT}, samples: N} from the sglang_answers "
                "role, or no answers key")
    if not isinstance(value, dict):
        raise ReportError(f"{where}: answers is a JSON {type(value).__name__}; {expected}")
    passed, classes, samples = value.get("passed"), value.get("classes", {}), value.get("samples")
    if not isinstance(passed, bool):
        raise ReportError(f"{where}: answers.passed is {json.dumps(passed)}; {expected}")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
        raise ReportError(f"{where}: answers.samples is {json.dumps(samples)}; {expected}")
    if not isinstance(classes, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in classes.items()):
        raise ReportError(f"{where}: answers.classes is {json.dumps(classes)[:200]}; {expected}")
    return Answers(passed, dict(classes), samples)


def read_run(directory: Path) -> Run:
    """A run directory: its results, its power samples and its label."""
    if not directory.is_dir():
        raise ReportError(f"{directory}: no such run directory; expected a directory from playbooks/bench.yml "
                          "holding results.jsonl")
    levels, lines = parse_results(directory / "results.jsonl")
    label = directory.name
    answers = None
    run_json = directory / "run.json"
    if os.path.lexists(run_json):
        try:
            meta = json.loads(read_text(run_json, "the run's description from playbooks/bench.yml"))
        except json.JSONDecodeError as exc:
            raise ReportError(f"{run_json}:{exc.lineno}: not JSON ({exc.msg})") from None
        if isinstance(meta, dict) and isinstance(meta.get("label"), str) and meta["label"].strip():
            label = meta["label"].strip()
        if isinstance(meta, dict):
            answers = parse_answers(meta.get("answers"), str(run_json))
    notes = [note for note in [repeats_note(label, "results.jsonl", lines)] if note]
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise ReportError(f"{directory}: cannot be listed ({exc.strerror})") from None
    for csv in entries:
        match = POWER_FILE_RE.match(csv.name)
        if not match:
            continue
        concurrency = int(match.group(1))
        sample = parse_power(csv)
        if concurrency not in levels:
            notes.append(f"{csv.name}: no result for concurrency {concurrency}; power ignored")
            continue
        for key, value in sample.items():
            setattr(levels[concurrency], key, value)
    return Run(label=label, directory=str(directory), levels=levels, notes=notes, answers=answers)


def read_runs(directories: list[str]) -> list[Run]:
    """Every run, read and checked; labels made unique with the directory name."""
    if not directories:
        raise ReportError("no runs given; expected bench_report_runs=DIR_A[,DIR_B,...]")
    runs = [read_run(Path(directory)) for directory in directories]
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.label] = seen.get(run.label, 0) + 1
    for run in runs:
        if seen[run.label] > 1:
            run.label = f"{run.label} ({Path(run.directory).name})"
    return runs


def level_summary(run_dir: Path, concurrency: int) -> str:
    """The progress line printed as a level finishes."""
    levels, _ = parse_results(run_dir / "results.jsonl")
    if concurrency not in levels:
        raise ReportError(f"{run_dir / 'results.jsonl'}: no line for concurrency {concurrency_name(concurrency)}; "
                          "the benchmark wrote no result for this level")
    level = levels[concurrency]
    csv = run_dir / f"power-{concurrency}.csv"
    power = parse_power(csv)["power_w"] if os.path.lexists(csv) else None
    watts = "not sampled" if power is None else f"{power:.0f} W per GPU"
    return (f"concurrency {concurrency_name(concurrency)}: {level.total_throughput:.1f} tok/s total, "
            f"p99 TTFT {level.p99_ttft_ms:.1f} ms, mean power {watts}")
