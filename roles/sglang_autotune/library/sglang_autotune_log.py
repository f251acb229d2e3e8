#!/usr/bin/python
"""Ansible module: keep the autotune role's log of its edit; a failure is a warning."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_autotune_log
short_description: Write or remove the autotune role's log of its edit, warning instead of failing
description:
  - Writes I(content) to I(state_file) (creating I(state_dir)) through a temporary file and a
    rename, or removes I(state_file).
  - The log is only a log while pip's RECORD lists the gate file, so a log that cannot be written
    (a full disk, a file where I(state_dir) should be, a read-only mount) is a warning, never a
    failure, and the next run works the same way.
  - In check mode reports what it would change, and the same warning, and writes nothing.
options:
  state_dir:
    description: The log directory.
    type: path
    required: true
  state_file:
    description: The log file, inside I(state_dir).
    type: path
    required: true
  content:
    description: The log's text, with I(state=present).
    type: str
    default: ""
  state:
    description: C(present) writes the log, C(absent) removes it.
    type: str
    choices: [present, absent]
    default: present
  decides:
    description: Whether a rollback reads this log (no RECORD lists the gate file); said in the warning.
    type: bool
    default: false
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Log the edit
  sglang_autotune_log:
    state_dir: /var/lib/sglang_autotune
    state_file: /var/lib/sglang_autotune/x.json
    content: "{}"
"""

RETURN = r"""
logged:
  description: Whether the log is as asked after this run (false with a warning).
  returned: always
  type: bool
warning:
  description: Why the log could not be kept, empty when it could.
  returned: always
  type: str
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_gate_write import remove_log, write_log


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            state_dir=dict(type="path", required=True),
            state_file=dict(type="path", required=True),
            content=dict(type="str", default=""),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            decides=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    state_file = Path(params["state_file"])
    if params["state"] == "present":
        changed, warning = write_log(Path(params["state_dir"]), state_file, params["content"],
                                     params["decides"], module.check_mode)
    else:
        changed, warning = remove_log(state_file, module.check_mode)
    if warning:
        module.warn(warning)
    module.exit_json(changed=changed, logged=not warning, warning=warning)


if __name__ == "__main__":
    main()
