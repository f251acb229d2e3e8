"""The report of benchmark runs read by sglang_bench_runs.py: report.md's table and throughput.png.

Ratios are per concurrency against the first run. Labels, paths and notes come from the user's
files, so they are escaped for Markdown and for the plot's legend.

Standard library only; the plot imports matplotlib when it is drawn.
"""

from __future__ import annotations

import io
import re
from typing import Any, Optional

from ansible.module_utils.sglang_bench_runs import UNBOUNDED, Run, concurrency_name, concurrency_order

# Markdown: what would start markup or end a table cell is escaped, and so is what would
# start a block at the head of a list item; control characters and line breaks are shown.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#+!|~$&])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _visible(text: str) -> str:
    return _CONTROL.sub(lambda match: ascii(match.group(0))[1:-1], text)


def md_text(text: str) -> str:
    """Text from a label, a path or a note as Markdown shows it, never as markup or a new line."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", _visible(text))
    # At the head of a list item, "-", "=" or "1." would start a list or a heading.
    escaped = re.sub(r"^([-=])", r"\\\1", escaped)
    return re.sub(r"^([0-9]+)([.)])", r"\1\\\2", escaped)


def md_code(text: str) -> str:
    """A label as an inline code span that no backtick or line break inside it can end."""
    visible = _visible(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", visible)), default=0) + 1)
    pad = " " if visible.startswith("`") or visible.endswith("`") else ""
    return f"{fence}{pad}{visible}{pad}{fence}"


def plot_label(text: str) -> str:
    """A legend entry: no mathtext ($), not hidden by a leading underscore, one line."""
    visible = _visible(text).replace("$", r"\$")
    return " " + visible if visible.startswith("_") else visible


def concurrencies(runs: list[Run]) -> list[int]:
    return sorted({c for run in runs for c in run.levels}, key=concurrency_order)


def ratio(value: Optional[float], base: Optional[float]) -> Optional[str]:
    """value/base to two decimals; None when either side is missing or base is 0."""
    if value is None or base is None or base == 0:
        return None
    quotient = value / base
    return f"{quotient:.2f}" if quotient < 1e7 else f"{quotient:.4g}"


def _fmt(value: Optional[float], digits: int) -> str:
    """Fixed point, or %g beyond 1e7 so that no cell grows with the number's size."""
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if abs(value) < 1e7 else f"{value:.4g}"


def answers_text(run: Run) -> str:
    """What the answer check of a run found, in a few words."""
    if run.answers is None:
        return "not checked"
    if run.answers.passed:
        return f"passed ({run.answers.samples} answers checked)"
    found = run.answers.corrupt() or "no class counted"
    return f"FAILED: {found} of {run.answers.samples} answers"


def table_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per concurrency and run, with the ratio of total throughput to the first run.

    A run whose answers failed the check never shows a gain: its ratio, and every ratio against
    a base whose answers failed, is replaced by why it is not counted.
    """
    rows = []
    base = runs[0]
    for concurrency in concurrencies(runs):
        base_level = base.levels.get(concurrency)
        for index, run in enumerate(runs):
            level = run.levels.get(concurrency)
            row: dict[str, Any] = {"concurrency": concurrency, "run": run.label, "present": level is not None,
                                   "corrupt": run.answers_failed}
            if level is not None:
                row.update(vars(level))
            if index > 0:
                row["ratio"] = ratio(level.total_throughput if level else None,
                                     base_level.total_throughput if base_level else None)
                if row["ratio"] is not None and (run.answers_failed or base.answers_failed):
                    row["ratio"] = ("not counted: corrupt answers" if run.answers_failed
                                    else "not counted: the base's answers are corrupt")
            rows.append(row)
    return rows


def render_markdown(runs: list[Run]) -> str:
    """report.md: the table, what each ratio compares, and the notes."""
    compare = len(runs) > 1
    power = any(run.power_sampled for run in runs)
    head = ["Concurrency", "Run", "Total tok/s", "Output tok/s", "Mean TTFT ms", "P99 TTFT ms", "P99 ITL ms"]
    if power:
        head.append("Mean GPU power W")
    if compare:
        head.append(f"Total vs {md_text(runs[0].label)}")
    lines = [
        "# SGLang serving benchmark",
        "",
        "Runs: " + ", ".join(f"{md_code(run.label)} ({md_text(run.directory)})" for run in runs) + ".",
    ]
    if compare:
        lines.append(f"Ratios: total throughput of each run divided by {md_code(runs[0].label)}'s "
                     "at the same concurrency.")
    if any(run.answers is not None for run in runs):
        lines.append("Answers: " + "; ".join(f"{md_code(run.label)} {md_text(answers_text(run))}" for run in runs)
                     + ". A run with corrupt answers is marked; its throughput never counts as a gain.")
    if any(UNBOUNDED in run.levels for run in runs):
        lines.append("Concurrency unbounded: the benchmark ran without --max-concurrency (SGLang's default), "
                     "every request at once.")
    if power:
        lines.append("Power: mean draw per GPU over the samples taken while that level ran (nvidia-smi, 1 s).")
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table_rows(runs):
        if row["present"]:
            label = md_text(row["run"]) + (" (corrupt answers)" if row["corrupt"] else "")
            cells = [concurrency_name(row["concurrency"]), label, _fmt(row["total_throughput"], 1),
                     _fmt(row["output_throughput"], 1), _fmt(row["mean_ttft_ms"], 1),
                     _fmt(row["p99_ttft_ms"], 1), _fmt(row["p99_itl_ms"], 2)]
            if power:
                cells.append(_fmt(row["power_w"], 0) if row["power_w"] is not None else "not sampled")
        else:
            cells = [concurrency_name(row["concurrency"]), md_text(row["run"]), "not run at this concurrency"] + [""] * (4 + int(power))
        if compare:
            cells.append("" if "ratio" not in row else (row["ratio"] or "-"))
        lines.append("| " + " | ".join(cells) + " |")
    notes = [note for run in runs for note in run.notes]
    for concurrency in concurrencies(runs):
        only = [run.label for run in runs if concurrency in run.levels]
        if compare and len(only) < len(runs):
            notes.append(f"concurrency {concurrency_name(concurrency)}: only in {', '.join(only)}")
    if notes:
        lines += ["", "Notes:", ""] + [f"- {md_text(note)}" for note in notes]
    return "\n".join(lines) + "\n"


def render_plot(runs: list[Run], title: str = "SGLang serving benchmark") -> bytes:
    """throughput.png: total throughput vs concurrency per run; power per GPU below when sampled."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    power = any(run.power_sampled for run in runs)
    ticks = concurrencies(runs)
    bounded = [c for c in ticks if c != UNBOUNDED]
    # The unbounded level sits one step right of the largest bounded one (the x axis is log 2).
    where = {c: (c if c != UNBOUNDED else 2 * max(bounded, default=1)) for c in ticks}
    fig, axes = plt.subplots(2 if power else 1, 1, figsize=(8, 7 if power else 4.5), dpi=100,
                             sharex=True, squeeze=False)
    top = axes[0][0]
    for run in runs:
        xs = sorted(run.levels, key=concurrency_order)
        top.plot([where[c] for c in xs], [run.levels[c].total_throughput for c in xs], marker="o",
                 label=plot_label(run.label))
    top.set_ylabel("total throughput (tok/s)")
    top.set_title(title)
    top.grid(True, alpha=0.3)
    top.legend()
    if power:
        bottom = axes[1][0]
        for run in runs:
            xs = [c for c in sorted(run.levels, key=concurrency_order) if run.levels[c].power_w is not None]
            if xs:
                bottom.plot([where[c] for c in xs], [run.levels[c].power_w for c in xs], marker="s",
                            label=plot_label(run.label))
        bottom.set_ylabel("mean power per GPU (W)")
        bottom.grid(True, alpha=0.3)
        bottom.legend()
    axes[-1][0].set_xlabel("concurrency")
    axes[-1][0].set_xscale("log", base=2)
    axes[-1][0].set_xticks([where[t] for t in ticks], [concurrency_name(t) for t in ticks])
    fig.tight_layout()
    buffer = io.BytesIO()
    # No Software/date metadata: the same runs give the same bytes.
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()
