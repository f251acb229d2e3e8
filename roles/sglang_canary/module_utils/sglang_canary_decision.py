"""The canary's decision: the candidate release against the current one, on the same replica.

Plain functions, standard library only (they run as Ansible module_utils on the controller and
pytest calls them). Inputs are sglang_bench run directories (run.json and results.jsonl, the
lines SGLang's serving benchmark appends) and the answer check's result; the output is a
verdict per concurrency, a decision, and the entry the promotion log keeps.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

LOG_FORMAT = 1


class CanaryError(Exception):
    """Input the decision cannot be made from; the message names the file and what was expected."""


@dataclass
class Level:
    concurrency: int
    total_throughput: float
    p99_ttft_ms: float


@dataclass
class Verdict:
    """One concurrency: the ratios candidate/baseline and whether they are within tolerance."""

    concurrency: int
    baseline_tok_s: float
    candidate_tok_s: float
    throughput_ratio: float
    baseline_p99_ttft_ms: float
    candidate_p99_ttft_ms: float
    ttft_ratio: float
    regressions: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.regressions


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise CanaryError(f"{where}: {key} is {value!r}; expected a finite number of 0 or more")
    return float(value)


def read_levels(results: Path) -> dict[int, Level]:
    """Each concurrency's last line in a results.jsonl (a level run twice keeps its latest)."""
    try:
        text = results.read_text(encoding="utf-8")
    except OSError as exc:
        raise CanaryError(f"{results}: cannot be read ({exc.strerror}); expected the results.jsonl "
                          "of a playbooks/bench.yml run") from None
    levels: dict[int, Level] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{results}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CanaryError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("max_concurrency"), int):
            raise CanaryError(f"{where}: no integer max_concurrency; expected a line of SGLang's serving benchmark")
        concurrency = record["max_concurrency"]
        levels[concurrency] = Level(concurrency, _number(record.get("total_throughput"), where, "total_throughput"),
                                    _number(record.get("p99_ttft_ms"), where, "p99_ttft_ms"))
    return levels


def compare(baseline: dict[int, Level], candidate: dict[int, Level], concurrencies: list[int],
            throughput_tolerance: float, ttft_tolerance: float) -> list[Verdict]:
    """Per concurrency: candidate total tok/s at least (100 + throughput_tolerance)% of the
    baseline's (tolerance -3: at most 3% slower), p99 TTFT at most (100 + ttft_tolerance)%."""
    verdicts = []
    for concurrency in concurrencies:
        for name, levels in (("baseline", baseline), ("candidate", candidate)):
            if concurrency not in levels:
                raise CanaryError(f"the {name} run has no result at concurrency {concurrency} "
                                  f"(it has {sorted(levels) or 'none'})")
        old, new = baseline[concurrency], candidate[concurrency]
        ratio = new.total_throughput / old.total_throughput if old.total_throughput else math.inf
        ttft = new.p99_ttft_ms / old.p99_ttft_ms if old.p99_ttft_ms else (1.0 if not new.p99_ttft_ms else math.inf)
        verdict = Verdict(concurrency, old.total_throughput, new.total_throughput, round(ratio, 4),
                          old.p99_ttft_ms, new.p99_ttft_ms, round(ttft, 4))
        if ratio < 1 + throughput_tolerance / 100:
            verdict.regressions.append(
                f"total throughput {new.total_throughput:.1f} tok/s against {old.total_throughput:.1f} "
                f"({(ratio - 1) * 100:+.1f}%, tolerance {throughput_tolerance:+.1f}%)")
        if ttft > 1 + ttft_tolerance / 100:
            verdict.regressions.append(
                f"p99 TTFT {new.p99_ttft_ms:.1f} ms against {old.p99_ttft_ms:.1f} "
                f"({(ttft - 1) * 100:+.1f}%, tolerance {ttft_tolerance:+.1f}%)")
        verdicts.append(verdict)
    return verdicts


def decide(answers: Optional[dict[str, Any]], verdicts: list[Verdict], canary: str, release: str,
           previous: str) -> tuple[bool, str]:
    """Promote only when the answers passed (or the check was not asked for: answers None) and
    every concurrency is within tolerance; the message names each regression."""
    reasons = []
    if answers is not None and not answers.get("passed"):
        classes = {k: v for k, v in (answers.get("classes") or {}).items() if v}
        reasons.append(f"answers failed ({', '.join(f'{k} {v}' for k, v in classes.items()) or 'no class named'}"
                       f"{': ' + str(answers['msg']) if answers.get('msg') else ''})")
    for verdict in verdicts:
        for regression in verdict.regressions:
            reasons.append(f"concurrency {verdict.concurrency}: {regression}")
    if reasons:
        return False, (f"SGLang {release} refused on canary {canary} (compared with {previous} on the same "
                       "replica): " + "; ".join(reasons))
    ratios = ", ".join(f"{v.concurrency}: x{v.throughput_ratio:.3f} tok/s, x{v.ttft_ratio:.3f} p99 TTFT"
                       for v in verdicts)
    return True, (f"SGLang {release} promoted from canary {canary} (against {previous}: {ratios}"
                  f"{'' if answers is None else '; answers passed'})")


def run_matches(run_dir: Path, host: str, version: str, concurrencies: list[int], input_len: int,
                output_len: int) -> bool:
    """Whether a bench run is this replica's, on this release, with this workload at every level."""
    try:
        meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        levels = read_levels(run_dir / "results.jsonl")
    except (OSError, ValueError, CanaryError):
        return False
    return (isinstance(meta, dict) and meta.get("host") == host and meta.get("sglang_version") == version
            and meta.get("input_len") == input_len and meta.get("output_len") == output_len
            and all(c in levels for c in concurrencies))


def find_baseline(runs_dir: Path, host: str, version: str, concurrencies: list[int], input_len: int,
                  output_len: int) -> Optional[str]:
    """The newest run of this replica on this release with the same workload, or None."""
    if not runs_dir.is_dir():
        return None
    found = []
    for run_dir in runs_dir.iterdir():
        if run_dir.is_dir() and not run_dir.is_symlink() and run_matches(
                run_dir, host, version, concurrencies, input_len, output_len):
            started = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("started_at", "")
            found.append((str(started), run_dir.name, str(run_dir)))
    return max(found)[2] if found else None


def read_log(path: Path) -> list[dict[str, Any]]:
    """The promotion log's entries, oldest first; none when the file does not exist."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CanaryError(f"{path}: not a promotion log ({exc}); expected the JSON file this role writes. "
                          "Move it aside and run again.") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise CanaryError(f"{path}: no 'entries' list; expected the JSON file this role writes. "
                          "Move it aside and run again.")
    return [entry for entry in data["entries"] if isinstance(entry, dict)]


def log_with(entries: list[dict[str, Any]], entry: dict[str, Any]) -> str:
    return json.dumps({"format": LOG_FORMAT, "entries": [*entries, entry]}, indent=2, sort_keys=True) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """The whole file or the old one: written beside it, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(scratch, 0o644)
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


def previous_release(versions: dict[str, str], canary: str) -> str:
    """The release the fleet runs: the one most replicas other than the canary run (the canary's
    own with no other replica). A controller killed in the canary phase leaves the canary on the
    candidate; the others still say what the fleet runs."""
    others = Counter(v for host, v in versions.items() if host != canary and v)
    if not others:
        return versions.get(canary, "")
    top = max(others.values())
    tied = sorted(v for v, n in others.items() if n == top)
    return versions[canary] if versions.get(canary) in tied else tied[0]


def promotion_in_progress(entries: list[dict[str, Any]], versions: dict[str, str]) -> Optional[dict[str, Any]]:
    """The last entry when it promoted a release that some replicas run while others still run
    the release it replaced (a roll stopped or killed after its canary passed): the roll goes
    on without a second canary. None otherwise."""
    if not entries or entries[-1].get("decision") != "promoted":
        return None
    last = entries[-1]
    running = set(versions.values())
    return last if last.get("release") in running and last.get("previous") in running else None


def verdicts_as_dicts(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    return [{**asdict(v), "ok": v.ok} for v in verdicts]
