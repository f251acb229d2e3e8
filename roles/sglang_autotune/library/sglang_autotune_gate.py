#!/usr/bin/python
"""Ansible module: decide the one edit of SGLang's FlashInfer autotune gate, from RECORD and the file."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_autotune_gate
short_description: Decide the one edit of SGLang's FlashInfer autotune gate
description:
  - Finds the installed SGLang package, either from I(package_dir) or from the
    package that I(python) would import, and the one gate function
    C(_?should_run_flashinfer_autotune) in C(srt/model_executor/model_runner.py),
    C(srt/model_executor/runner/base_runner.py) or
    C(srt/model_executor/runner/flashinfer_autotune.py).
  - Reports whether the C("flashinfer_cutlass",) entry of the gate's backend list
    is C(commented), C(enabled) or C(absent), and decides the single
    M(ansible.builtin.lineinfile) edit (I(file), I(regexp), I(edit_line)) that makes it match I(autotune).
  - When no edit is due the file is final, so this module keeps the log of it in I(state_dir)
    (written for a patched file, removed for one as shipped; a warning, never a failure, while
    RECORD lists the file). After an edit M(sglang_autotune_proof) keeps it.
  - Decides "as shipped" from pip's C(RECORD) in the installed C(sglang-*.dist-info)
    (the file's sha256 as shipped). A file equal to it is as shipped; one that equals
    it with only the entry line toggled is patched, whoever patched it; anything else
    fails. Without a RECORD listing the file (an editable or source install) this role's
    log in I(state_dir) of the original bytes is the reference, and this module writes it
    before an edit that uncomments the entry (nothing else remembers the original line after it).
    With RECORD the log is never read.
  - Fails before any change when the gate is missing, ambiguous, only outside the gate,
    in a form it does not edit, has CRLF line endings, is not a regular file, is reached
    through a symbolic link, holds a NUL byte, is listed in RECORD with a malformed hash,
    or is not readable Python; and, in check mode as in a real run, when the edit could
    not be written (a read-only mount, an immutable file, a directory or file the user
    may not write). M(sglang_autotune_proof) proves the edit afterwards.
options:
  package_dir:
    description: The sglang package directory (the folder holding C(srt/)); absolute, taken literally (no C($VAR) or C(~) expansion).
    type: str
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
    description: Directory of this role's log of its edits (read only without RECORD); taken literally.
    type: str
    default: /var/lib/sglang_autotune
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Decide the edit of the gate of the SGLang in a virtualenv
  sglang_autotune_gate:
    python: /opt/sglang/current/bin/python
    autotune: true
  register: gate
"""

RETURN = r"""
package_dir:
  description: The sglang package directory inspected (links resolved).
  returned: always
  type: str
version:
  description: SGLang version (dist-info METADATA, else the package's version file).
  returned: always
  type: str
  sample: 0.5.10
file:
  description: The file holding the gate; the edit's path.
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
  description: C(enable), C(disable) or C(none); the edit to make.
  returned: always
  type: str
regexp:
  description: The lineinfile regexp, proven to match only the gate's entry.
  returned: always
  type: str
edit_line:
  description: The lineinfile line (with backrefs), the entry line as it will be.
  returned: always
  type: str
validate:
  description:
    - The lineinfile C(validate) command of this edit (empty when none is due), which refuses a temporary
      file that is not the reference's bytes with at most the entry line changed, in the decided state, or
      does not compile (module_utils sglang_gate_validate, run by the target's Python, nothing written).
  returned: always
  type: str
upstream_enabled:
  description: Whether SGLang ships the entry enabled (0.5.13 and later).
  returned: always
  type: bool
server_args:
  description: Server flags the service role adds, e.g. C(disable-flashinfer-autotune).
  returned: always
  type: dict
log_warning:
  description: Why the log could not be kept (no edit due), empty when it could.
  returned: when installed
  type: str
decided_by:
  description: C(RECORD), C(log) (this role's log of the original, no RECORD) or C(file) (neither).
  returned: when installed
  type: str
state_file:
  description: Where the log of this role's edit lives.
  returned: when installed
  type: str
enabled:
  description: The I(autotune) choice as a boolean.
  returned: always
  type: bool
ansible_facts:
  description:
    - >-
      C(sglang_autotune_result), the one result every reader uses (read as
      C(ansible_facts.sglang_autotune_result)) - C(enabled), C(version), C(file), C(state) (the entry
      after this run, once the decided edit is made: M(ansible.builtin.lineinfile) makes it and
      M(sglang_autotune_proof) proves it, or the run fails), C(upstream_enabled), C(action) and
      C(server_args).
  returned: always
  type: dict
message:
  description: One sentence for the operator.
  returned: always
  type: str
"""

import os
import sys
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_locate import LOCATE_ARGUMENT_SPEC, LOCATE_REQUIRED_ONE_OF, locate_package
from ansible.module_utils.sglang_gate import GateError, inspect_gate, python_problem
from ansible.module_utils.sglang_gate_plan import (autotune_choice, decide, final_log, log_ahead, reference, target_state,
                                                  validate_command)
from ansible.module_utils.sglang_gate_record import RecordError, record_digest
from ansible.module_utils.sglang_gate_write import (
    log_problem,
    log_text,
    read_log,
    remove_log,
    replace_problem,
    state_file_for,
    write_log,
)


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
        result = dict(state="not_installed", action="none", version="not installed", file="",
                      upstream_enabled=False, server_args={}, enabled=enabled)
        module.exit_json(changed=False, lineno=0, regexp="", edit_line="", **result, ansible_facts=published(result),
                         message="SGLang is not installed yet: check mode cannot inspect its gate.")
    try:
        module.exit_json(**decide_edit(module, package_dir, enabled))
    except (GateError, RecordError) as exc:
        module.fail_json(msg=str(exc), package_dir=package_dir)
    except (OSError, ValueError) as exc:
        # The checks name what they refuse; this names whatever slipped past them.
        where = getattr(exc, "filename", None) or package_dir
        module.fail_json(msg=f"reading SGLang's autotune gate under {package_dir} failed at {where}: "
                         f"{type(exc).__name__}: {exc}. Nothing was changed. Reinstall SGLang, or "
                         "point sglang_autotune_package_dir at the sglang package directory.",
                         package_dir=package_dir)


PUBLISHED = ("enabled", "version", "file", "state", "upstream_enabled", "action", "server_args")


def published(result: dict) -> dict:
    """The role's one published result, as a fact: every reader reads ansible_facts.sglang_autotune_result."""
    return {"sglang_autotune_result": {key: result[key] for key in PUBLISHED}}


def decide_edit(module: AnsibleModule, package_dir: str, enabled: bool) -> dict:
    """The module's result; GateError (or an OSError that names its file) when it must fail."""
    state_dir = Path(module.params["state_dir"])
    report = inspect_gate(package_dir)
    data = Path(report.file).read_bytes()
    state_file = state_file_for(state_dir, report.file)
    record = record_digest(report.package_dir, report.file, report.version)
    # With RECORD, this role's log is never read: it cannot decide anything.
    log, log_why = read_log(state_file) if record is None else (None, "")
    decision = decide(report, reference(report, record, log, log_why, state_file), enabled, data)
    if decision.action != "none":
        problem = replace_problem(Path(report.file))
        if problem:
            raise GateError(
                f"SGLang {report.version}: {report.file} cannot be edited ({decision.action} the "
                f'"flashinfer_cutlass", entry): {problem}. Nothing was changed; --check fails '
                "the same way."
            )
    changed, log_warning = False, ""
    if decision.action == "none":
        # No edit is due, so the file is final: its log is kept here (after an edit, by the proof).
        final = final_log(report, decision.shipped)
        decides = decision.shipped.reference.kind != "RECORD"
        if final is not None:
            changed, log_warning = write_log(state_dir, state_file, log_text(final), decides, module.check_mode)
        else:
            changed, log_warning = remove_log(state_file, module.check_mode)
        if log_warning:
            module.warn(log_warning)
    ahead = log_ahead(report, decision)
    if ahead is not None:
        why = log_problem(state_dir, state_file)
        if not why:
            changed, why = write_log(state_dir, state_file, log_text(ahead), True, module.check_mode)
        if why:
            raise GateError(
                f"SGLang {report.version}: no RECORD lists {report.file} (an editable or source "
                f"install), so this role's log is what a later rollback reads, and it cannot be "
                f"written: {why}. Nothing was changed. Point sglang_autotune_state_dir at a "
                "writable directory, or install SGLang from a wheel (pip's RECORD then decides)."
            )
    result = dict(report.as_dict(), changed=changed, enabled=enabled, state_file=str(state_file),
                  action=decision.action, regexp=decision.regexp, edit_line=decision.line,
                  validate=validate_command(sys.executable, report.lineno, decision, enabled) if decision.action != "none" else "",
                  upstream_enabled=decision.upstream_enabled, server_args=decision.server_args,
                  decided_by=decision.shipped.reference.kind, log_warning=log_warning, message=decision.message)
    # What the entry is after this run: the edit decided here is made next, and proven, or the run fails.
    return dict(result, ansible_facts=published(dict(result, state=target_state(decision.shipped.state, enabled))))


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            LOCATE_ARGUMENT_SPEC,
            autotune=dict(type="raw", default=True),
            state_dir=dict(type="str", default="/var/lib/sglang_autotune"),
        ),
        required_one_of=LOCATE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
