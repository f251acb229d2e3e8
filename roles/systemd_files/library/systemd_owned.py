#!/usr/bin/python
"""Ansible module: refuse, before any change, a unit or a file this project did not write (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_owned
short_description: Refuse a unit or a file this project did not write, before any change (read-only)
description:
  - For a role that writes its files with Ansible's own C(template) and C(copy) (gpu_host), the check
    the shared unit writer (C(systemd_files)' C(converge)) makes before it writes, run where the role
    checks its input, so that a refusal comes before any change.
  - I(unit_name) must be a service name systemd accepts, without a unit type's suffix (C(.socket)).
  - The unit I(unit_name)C(.service) at I(unit_path) is refused when a file there is not ours (it lacks
    the header of the role that writes it, or, for a unit without one, our C(Description=) and
    C(ExecStart=) program), when it is a symbolic link, or when another of I(unit_dirs) has a unit of
    that name that is not ours (a package's). Each file of I(files) is refused when it is a symbolic
    link or a file that does not begin with our header.
  - Every refusal at once, each naming the role's variable, what was found and how to fix it. Never
    changes anything; check mode runs the same check.
options:
  unit_name:
    description: The unit's name without C(.service).
    type: str
    required: true
  unit_path:
    description: Where the role writes the unit.
    type: path
    required: true
  unit_text:
    description: The unit's text as the role renders it (what makes an existing unit ours).
    type: str
    required: true
  unit_option:
    description: The role's variable that names the unit, for the messages.
    type: str
    required: true
  unit_dirs:
    description:
      - systemd's unit search path (C(systemd-analyze --system unit-paths)); empty for the usual
        C(/etc/systemd/system), C(/run/systemd/system), C(/usr/local/lib/systemd/system),
        C(/usr/lib/systemd/system) and C(/lib/systemd/system).
    type: list
    elements: path
    default: []
  files:
    description: Other files the role writes, each with its text and the variable that names it.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Where the role writes the file.
        type: path
        required: true
      text:
        description: The file's text as the role writes it (its first line is our header).
        type: str
        required: true
      option:
        description: The role's variable that names the file, for the messages.
        type: str
        required: true
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Refuse a unit or a modules-load file this role did not write
  systemd_owned:
    unit_name: nvidia-device-nodes
    unit_path: /etc/systemd/system/nvidia-device-nodes.service
    unit_text: "{{ lookup('ansible.builtin.template', 'nvidia-device-nodes.service.j2') }}"
    unit_option: gpu_host_unit_name
    files:
      - path: /etc/modules-load.d/nvidia-gpu-host.conf
        text: "# Managed by the gpu_host role: NVIDIA modules loaded at boot, before any container starts.\nnvidia\n"
        option: gpu_host_modules_load_file
"""

RETURN = r"""
problems:
  description: Each refusal (empty when the files are ours to write).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.systemd_files import file_owner_problem, unit_owner_problem
from ansible.module_utils.systemd_unit_name import unit_name_problem


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            unit_name=dict(type="str", required=True),
            unit_path=dict(type="path", required=True),
            unit_text=dict(type="str", required=True),
            unit_option=dict(type="str", required=True),
            unit_dirs=dict(type="list", elements="path", default=[]),
            files=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                text=dict(type="str", required=True),
                option=dict(type="str", required=True),
            )),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problem = unit_name_problem(params["unit_name"], params["unit_option"], "")
    if problem:
        module.fail_json(msg=f"{problem}. Nothing was changed.", problems=[problem])
    try:
        problems = [unit_owner_problem(params["unit_name"], params["unit_path"], params["unit_text"],
                                       params["unit_option"], params["unit_dirs"] or None)]
        problems += [file_owner_problem(f["path"], f["text"], f["option"]) for f in params["files"]]
    except OSError as exc:
        module.fail_json(msg=f"reading the files the role writes failed: {exc}. Nothing was changed.",
                         problems=[str(exc)])
    problems = [problem for problem in problems if problem]
    if problems:
        module.fail_json(msg=" ".join(problems), problems=problems)
    module.exit_json(changed=False, problems=[])


if __name__ == "__main__":
    main()
