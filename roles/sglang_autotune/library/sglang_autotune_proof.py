#!/usr/bin/python
"""Ansible module: prove the autotune gate's edit from the file read back, and keep its log."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_autotune_proof
short_description: Prove the edit of SGLang's autotune gate by reading the file back, and keep its log
description:
  - Runs after the M(ansible.builtin.lineinfile) edit that M(sglang_autotune_gate) decided. Reads the
    gate file back and proves it with Python's AST, C(compile()) and its sha256. Rolled back, the
    file must be what pip's C(RECORD) names. Patched, the file with the one entry line put back as
    shipped must be what C(RECORD) names. Without a RECORD listing the file, this role's log of the
    original bytes takes RECORD's place.
  - Then keeps the log of the edit in step with the file, through a temporary file and a rename;
    written for a patched file (the original and the read-back sha256), removed for one as shipped.
    While RECORD lists the file the log is only a log, so one that cannot be written or removed
    (a full disk, a file where I(state_dir) should be, a read-only mount) is a warning, never a
    failure.
  - In check mode the edit is not made, so nothing is read back; it reports what it would do with
    the log, and the same warning, and writes nothing.
options:
  package_dir:
    description: The sglang package directory, as M(sglang_autotune_gate) returned it; taken literally.
    type: str
    required: true
  state_dir:
    description: The log directory; taken literally.
    type: str
    required: true
  enabled:
    description: The autotune choice, as M(sglang_autotune_gate) published it.
    type: bool
    required: true
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Prove the edit
  sglang_autotune_proof:
    package_dir: "{{ gate.package_dir }}"
    state_dir: /var/lib/sglang_autotune
    enabled: "{{ gate.enabled }}"
"""

RETURN = r"""
state:
  description: The entry as read back, C(commented) or C(enabled).
  returned: always
  type: str
sha256:
  description: sha256 of the gate file as read back.
  returned: always
  type: str
outcome:
  description: C(patched) or C(shipped), what the file is.
  returned: always
  type: str
proven:
  description: Whether the file was proven (false in check mode, before the edit).
  returned: always
  type: bool
logged:
  description: Whether the log is as asked after this run (false with a warning).
  returned: always
  type: bool
warning:
  description: Why the log could not be kept, empty when it could.
  returned: always
  type: str
message:
  description: What was proven, for the operator.
  returned: always
  type: str
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_gate import GateError, inspect_gate
from ansible.module_utils.sglang_gate_plan import prove, reference
from ansible.module_utils.sglang_gate_record import RecordError, record_digest
from ansible.module_utils.sglang_gate_write import log_text, read_log, remove_log, state_file_for, write_log


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            package_dir=dict(type="str", required=True),
            state_dir=dict(type="str", required=True),
            enabled=dict(type="bool", required=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    state_dir = Path(params["state_dir"])
    try:
        report = inspect_gate(params["package_dir"])
        data = Path(report.file).read_bytes()
        state_file = state_file_for(state_dir, report.file)
        record = record_digest(report.package_dir, report.file, report.version)
        log, log_why = read_log(state_file) if record is None else (None, "")
        proof = prove(report, reference(report, record, log, log_why, state_file), params["enabled"],
                      data, module.check_mode)
    except (GateError, RecordError, OSError) as exc:
        module.fail_json(msg=f"The edit of SGLang's autotune gate under {params['package_dir']} is not "
                         f"proven: {exc}")
    if proof.log is not None:
        text = None if proof.pending else log_text(proof.log)
        changed, warning = write_log(state_dir, state_file, text, proof.decides, module.check_mode)
    else:
        changed, warning = remove_log(state_file, module.check_mode)
    if warning:
        module.warn(warning)
    module.exit_json(changed=changed, state=report.state, sha256=report.sha256, outcome=proof.outcome,
                     proven=not proof.pending, logged=not warning, warning=warning, message=proof.message)


if __name__ == "__main__":
    main()
