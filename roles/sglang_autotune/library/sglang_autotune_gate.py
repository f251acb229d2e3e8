#!/usr/bin/python
"""Ansible module: inspect, plan and verify SGLang's FlashInfer autotune gate."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_autotune_gate
short_description: Inspect, plan and verify SGLang's FlashInfer autotune gate (read-only)
description:
  - Finds the installed SGLang package, either from I(package_dir) or from the
    package that I(python) would import, and the one gate function
    C(_?should_run_flashinfer_autotune) in C(srt/model_executor/model_runner.py),
    C(srt/model_executor/runner/base_runner.py) or
    C(srt/model_executor/runner/flashinfer_autotune.py).
  - Reports whether the C("flashinfer_cutlass",) entry of the gate's backend list
    is C(commented), C(enabled) or C(absent), and plans the single
    M(ansible.builtin.lineinfile) edit that makes it match I(autotune).
  - Decides "as shipped" from pip's C(RECORD) in the installed C(sglang-*.dist-info)
    (the file's sha256 as shipped). A file equal to it is as shipped; one that equals
    it with only the entry line toggled is patched, whoever patched it; anything else
    fails. Without a RECORD listing the file (an editable install) it falls back to
    this project's record in I(state_dir); with RECORD that record is never read.
  - With I(verify), re-reads the file and proves the state with Python's AST,
    that the file compiles and, when given, its sha256.
  - Never writes anything; fails before any change when the gate is missing,
    ambiguous, only outside the gate, in a form it does not edit, has CRLF line
    endings, is not a regular file, is reached through a symbolic link, holds a NUL
    byte, is listed in RECORD with a malformed hash, or is not readable Python; and,
    in check mode as in a real run, when the planned edit could not be written (a
    read-only mount, an immutable file, a directory or file the user may not write).
options:
  package_dir:
    description: The sglang package directory (the folder holding C(srt/)); absolute.
    type: path
  python:
    description:
      - Python interpreter of the SGLang virtualenv; used to locate the package
        when I(package_dir) is not given. The package is found, not imported.
    type: path
  autotune:
    description:
      - Whether C(flashinfer_cutlass) should be autotuned.
      - A boolean, C(0) or C(1), or one of C(true), C(false), C(yes), C(no), C(on), C(off),
        C(1), C(0) in any case, the spellings Ansible's argument spec and its C(bool) filter
        read alike. Anything else fails before any change.
    type: raw
    default: true
  state_dir:
    description: Directory of this project's log of edits it made (read only without RECORD).
    type: path
    default: /var/lib/sglang_autotune
  verify:
    description: Prove this state instead of planning; fail when it does not hold.
    type: str
    choices: [enabled, commented]
  expect_sha256:
    description: With I(verify), the sha256 the file must have.
    type: str
    default: ""
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Inspect the gate of the SGLang in a virtualenv
  sglang_autotune_gate:
    python: /opt/sglang/current/bin/python
    autotune: true
  register: gate

- name: Prove the edit
  sglang_autotune_gate:
    package_dir: "{{ gate.package_dir }}"
    verify: enabled
"""

RETURN = r"""
package_dir:
  description: The sglang package directory inspected.
  returned: always
  type: str
version:
  description: SGLang version (dist-info METADATA, else the package's version file).
  returned: always
  type: str
  sample: 0.5.10
file:
  description: The file holding the gate.
  returned: always
  type: str
lineno:
  description: Line number of the C("flashinfer_cutlass",) entry (0 when absent).
  returned: always
  type: int
line:
  description: That line as it is now.
  returned: always
  type: str
sha256:
  description: sha256 of the gate file as it is now.
  returned: always
  type: str
state:
  description: C(commented), C(enabled) or C(absent); C(not_installed) in check mode before the install.
  returned: always
  type: str
action:
  description: C(enable), C(disable) or C(none); the edit the role should make.
  returned: when not verifying
  type: str
regexp:
  description: The lineinfile regexp, proven to match only the gate's entry.
  returned: when action is not none
  type: str
edit_line:
  description: The lineinfile line (with backrefs).
  returned: when action is not none
  type: str
enabled_by_project:
  description: Whether the entry is enabled because this project patched it.
  returned: when not verifying
  type: bool
upstream_enabled:
  description: Whether SGLang ships the entry enabled (0.5.13 and later).
  returned: when not verifying
  type: bool
server_args:
  description: Server flags the service role adds, e.g. C(disable-flashinfer-autotune).
  returned: when not verifying
  type: dict
state_file:
  description: Where the record of this project's edit lives.
  returned: always
  type: str
record:
  description: That record, when present.
  returned: always
  type: dict
record_stale:
  description: Without RECORD, this project's record no longer describes the file.
  returned: when not verifying
  type: bool
decided_by:
  description: C(RECORD) (pip's record of the shipped file decided) or C(record) (this project's, no RECORD).
  returned: when not verifying
  type: str
shipped_record:
  description: The RECORD file that named the shipped sha256 (empty without one).
  returned: when not verifying
  type: str
shipped_sha256:
  description: sha256 of the gate file as shipped.
  returned: when not verifying
  type: str
shipped_line:
  description: The entry line as shipped.
  returned: when not verifying
  type: str
expect_sha256:
  description: sha256 the file has after the planned edit (or now, when none).
  returned: when not verifying
  type: str
outcome:
  description: C(patched) or C(shipped), what the file is after this run.
  returned: when not verifying
  type: str
log:
  description: What the role does with its log, C(write), C(remove) or C(keep).
  returned: when not verifying
  type: str
log_text:
  description: The log's content when I(log) is C(write).
  returned: when not verifying
  type: str
enabled:
  description: The I(autotune) choice as a boolean; the role publishes it as C(sglang_autotune_result.enabled).
  returned: always
  type: bool
message:
  description: One sentence for the operator.
  returned: always
  type: str
"""

import csv
import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_locate import LOCATE_ARGUMENT_SPEC, LOCATE_REQUIRED_ONE_OF, locate_package
from ansible.module_utils.sglang_gate import (
    GateError,
    inspect_gate,
    python_problem,
    read_record,
    shipped_digest,
    state_file_for,
    verify_gate,
)
from ansible.module_utils.sglang_gate_plan import autotune_choice, log_step, plan_edit
from ansible.module_utils.sglang_gate_write import log_problem, replace_problem


def run(module: AnsibleModule) -> None:
    params = module.params
    try:
        enabled = autotune_choice(params["autotune"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if params["package_dir"] and not os.path.isabs(params["package_dir"]):
        module.fail_json(msg=f"sglang_package_dir={params['package_dir']!r} is a relative path; it would "
                         "be read relative to wherever the module happens to run on the target. Give "
                         f"an absolute path (e.g. -e sglang_package_dir=$PWD/{params['package_dir']}).")
    if not params["package_dir"] and params["python"] and os.path.lexists(params["python"]):
        problem = python_problem(params["python"])
        if problem:
            module.fail_json(msg=problem)
    package_dir = locate_package(module, params["package_dir"], params["python"])
    if package_dir is None:
        module.exit_json(changed=False, state="not_installed", action="none", version="not installed",
                         file="", lineno=0, upstream_enabled=False, record_stale=False, server_args={},
                         log="keep", outcome="shipped", decided_by="nothing", enabled=enabled,
                         message="SGLang is not installed yet: check mode cannot inspect its gate.")
    try:
        module.exit_json(**inspect_and_plan(module, package_dir, enabled))
    except GateError as exc:
        module.fail_json(msg=str(exc), package_dir=package_dir)
    except (OSError, ValueError, csv.Error) as exc:
        # The checks name what they refuse; this names whatever slipped past them.
        where = getattr(exc, "filename", None) or package_dir
        module.fail_json(msg=f"reading SGLang's autotune gate under {package_dir} failed at {where}: "
                         f"{type(exc).__name__}: {exc}. Nothing was changed. Reinstall SGLang, or "
                         "point sglang_autotune_package_dir at the sglang package directory.",
                         package_dir=package_dir)


def inspect_and_plan(module: AnsibleModule, package_dir: str, enabled: bool) -> dict:
    """The module's result; GateError (or an OSError that names its file) when it must fail."""
    params = module.params
    report = inspect_gate(package_dir)
    state_file = state_file_for(params["state_dir"], report.file)
    result = dict(report.as_dict(), state_file=str(state_file), record={}, changed=False, enabled=enabled)
    if params["verify"]:
        problems = verify_gate(report, params["verify"], params["expect_sha256"])
        if problems:
            raise GateError(f"verification of {report.file} failed: " + "; ".join(problems))
        result["message"] = (f"SGLang {report.version}: proven {report.state} at "
                             f"{report.file}:{report.lineno}, sha256 {report.sha256}")
        return result
    shipped = shipped_digest(report)
    # With RECORD, this project's log is never read: it cannot decide anything.
    record = read_record(state_file) if shipped is None else None
    result["record"] = record or {}
    result["shipped_record"] = shipped.record if shipped else ""
    plan = plan_edit(report, shipped, record, enabled)
    if plan.action != "none":
        problem = replace_problem(Path(report.file))
        if problem:
            raise GateError(
                f"SGLang {report.version}: {report.file} cannot be edited ({plan.action} the "
                f'"flashinfer_cutlass", entry): {problem}. Nothing was changed; --check fails '
                "the same way."
            )
    log_why = log_problem(Path(params["state_dir"]), state_file)
    if shipped is None and plan.action == "enable" and log_why:
        raise GateError(
            f"SGLang {report.version}: no RECORD lists {report.file} (an editable or source "
            f"install), so this role's log is what a later rollback reads, and it cannot be "
            f"written: {log_why}. Nothing was changed. Point sglang_autotune_state_dir at a "
            "writable directory, or install SGLang from a wheel (pip's RECORD then decides)."
        )
    plan_dict = plan.as_dict()
    plan_dict["edit_line"] = plan_dict.pop("line")
    plan_dict["log"], plan_dict["log_text"] = log_step(plan, report, state_file, shipped)
    result.update(plan_dict)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            LOCATE_ARGUMENT_SPEC,
            autotune=dict(type="raw", default=True),
            state_dir=dict(type="path", default="/var/lib/sglang_autotune"),
            verify=dict(type="str", choices=["enabled", "commented"]),
            expect_sha256=dict(type="str", default=""),
        ),
        required_one_of=LOCATE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
