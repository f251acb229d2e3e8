#!/usr/bin/python
"""Ansible module: compare recorded benchmark runs in report.md and throughput.png."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench_report
short_description: Write report.md and throughput.png from recorded SGLang benchmark runs
description:
  - Reads each run directory (C(results.jsonl) in SGLang's C(--output-file)
    format, C(power-<concurrency>.csv) from nvidia-smi, C(run.json)) and joins
    the runs by concurrency.
  - C(report.md) has, per concurrency and run, total and output throughput,
    mean and p99 TTFT, p99 ITL, mean GPU power where sampled, and the ratio of
    total throughput to the first run's, to two decimals.
  - C(throughput.png) plots total throughput against concurrency, one line per
    run, with power per GPU in a second panel when sampled (matplotlib, Agg).
  - Every input is read and checked first; a missing directory or file, or a
    malformed line, fails naming the file and the line, and nothing is written.
  - With I(summary_of), writes nothing and returns the progress line of one level.
options:
  runs:
    description: Run directories; the first is the base of the ratios.
    type: list
    elements: path
    required: true
  out:
    description: Directory to write C(report.md) and C(throughput.png) to (created).
    type: path
  summary_of:
    description: Concurrency whose progress line to return from the first run; nothing is written.
    type: int
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
requirements:
  - matplotlib (on the controller, for the plot)
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Compare two runs
  sglang_bench_report:
    runs: [bench-runs/autotune-off-20261130T140000Z, bench-runs/autotune-on-20261130T150000Z]
    out: bench-runs/report
  delegate_to: localhost
"""

RETURN = r"""
report:
  description: The Markdown written to report.md.
  returned: when I(out) is given
  type: str
files:
  description: The files written or found up to date.
  returned: when I(out) is given
  type: list
  elements: str
summary:
  description: The progress line of I(summary_of).
  returned: when I(summary_of) is given
  type: str
"""

import os
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_bench_report import (
    ReportError, level_summary, read_runs, render_markdown, render_plot,
)


def write_if_changed(path: Path, data: bytes) -> bool:
    if path.is_file() and path.read_bytes() == data:
        return False
    fd, temp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(temp, 0o644)
    os.replace(temp, path)
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            runs=dict(type="list", elements="path", required=True),
            out=dict(type="path"),
            summary_of=dict(type="int"),
        ),
        required_one_of=[("out", "summary_of")],
        mutually_exclusive=[("out", "summary_of")],
        supports_check_mode=True,
    )
    runs, out = module.params["runs"], module.params["out"]
    try:
        if module.params["summary_of"] is not None:
            summary = level_summary(Path(runs[0]), module.params["summary_of"])
            module.exit_json(changed=False, summary=summary)
        read = read_runs(runs)
        report = render_markdown(read)
    except ReportError as exc:
        module.fail_json(msg=f"{exc}. Nothing was written.")
    try:
        plot = render_plot(read)
    except ImportError as exc:
        module.fail_json(msg=f"matplotlib is missing on the controller ({exc}); "
                         "pip install -r requirements.txt. Nothing was written.")
    target = Path(out)
    wanted = {target / "report.md": report.encode("utf-8"), target / "throughput.png": plot}
    if module.check_mode:
        changed = any(not p.is_file() or p.read_bytes() != data for p, data in wanted.items())
    else:
        if target.exists() and not target.is_dir():
            module.fail_json(msg=f"{target} exists and is not a directory; give bench_report_out a directory. "
                             "Nothing was written.")
        target.mkdir(parents=True, exist_ok=True)
        changed = False
        for path, data in wanted.items():
            changed = write_if_changed(path, data) or changed
    module.exit_json(changed=changed, report=report, files=[str(p) for p in wanted])


if __name__ == "__main__":
    main()
