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
  - Every input is read and checked first; a missing directory or file, a FIFO,
    directory or device where a file is read, a malformed line, and a negative or
    non-finite number fail naming the file and the line, and nothing is written.
  - >-
    I(out) is checked in check mode as in a real run: an I(out) that is a file, a
    directory that cannot be written or created, a read-only file system, and a
    C(report.md) or C(throughput.png) that is no regular file fail naming the path.
  - Both files are written to temporaries beside them and renamed only once both are
    complete; on an error the temporaries are removed and the old files stay.
  - Labels are escaped for Markdown; a level measured more than once gets one note per run.
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

import importlib.util
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_bench_output import OutputError, changed_files, dir_problem, write_all
from ansible.module_utils.sglang_bench_render import render_markdown, render_plot
from ansible.module_utils.sglang_bench_runs import ReportError, level_summary, read_runs

FILES = ("report.md", "throughput.png")


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
    if importlib.util.find_spec("matplotlib") is None:
        module.fail_json(msg="matplotlib is missing on the controller; pip install -r requirements.txt "
                         "(scripts/dev.sh setup does). Nothing was written.")
    plot = render_plot(read)
    target = Path(out)
    wanted = {target / "report.md": report.encode("utf-8"), target / "throughput.png": plot}
    problem = dir_problem(target, FILES)
    if problem:
        module.fail_json(msg=f"Cannot write the report: {problem}. Give bench_report_out a directory "
                         "this user can write (or create). Nothing was written.")
    try:
        changed = bool(changed_files(wanted) if module.check_mode else write_all(wanted))
    except OutputError as exc:
        module.fail_json(msg=f"Cannot write the report: {exc}.")
    module.exit_json(changed=changed, report=report, files=[str(p) for p in wanted])


if __name__ == "__main__":
    main()
