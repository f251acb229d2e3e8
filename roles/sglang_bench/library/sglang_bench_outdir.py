#!/usr/bin/python
"""Ansible module: check that a directory the benchmark writes into can be written (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench_outdir
short_description: Check that a benchmark output directory can be written or created (changes nothing)
description:
  - Fails, naming the path and the variable, when I(path) is not a directory (a file, a FIFO),
    when it or the nearest existing directory above it cannot be written by this user, or
    when it is on a read-only file system.
  - Answers the same in check mode and in a real run, so C(--check) fails where the run would.
    Never changes anything.
options:
  path:
    description: The directory the run writes into or creates.
    type: path
    required: true
  name:
    description: The variable that gave I(path), for the message.
    type: str
    required: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Check that results can be written on the controller
  sglang_bench_outdir:
    path: "{{ sglang_bench_runs_dir | ansible.builtin.realpath }}"
    name: sglang_bench_runs_dir
  delegate_to: localhost
"""

RETURN = r"""
path:
  description: The directory checked.
  returned: always
  type: str
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_bench_output import dir_problem


def main() -> None:
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "name": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    path, name = module.params["path"], module.params["name"]
    problem = dir_problem(Path(path))
    if problem:
        module.fail_json(msg=f"{name}: {problem}. Give {name} a directory this user can write (or create); "
                         "nothing was changed.", path=path)
    module.exit_json(changed=False, path=path)


if __name__ == "__main__":
    main()
