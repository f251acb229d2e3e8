#!/usr/bin/python
"""Ansible module: the install root checked where it resolves on the target, before anything is made."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_root_check
short_description: Check that the SGLang install root can hold the installs, as the target resolves it
description:
  - Resolves I(root) on the target (through any symlink) and refuses a system directory, a path
    through a file, a C(venvs), C(tools) or C(cache) that is not a directory, or a root that is not
    writable. Reads only, so check mode fails where the real run would.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  root: {description: The install root as given (C(sglang_root))., type: str, required: true}
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Check the install root on the target
  sglang_root_check:
    root: /opt/sglang
"""

RETURN = r"""
resolved: {description: The path the root resolves to on the target., returned: always, type: str}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_install_root import root_problem


def main() -> None:
    module = AnsibleModule(argument_spec={"root": {"type": "str", "required": True}}, supports_check_mode=True)
    root = module.params["root"]
    resolved = os.path.realpath(root)
    problem = root_problem(root)
    if problem:
        module.fail_json(msg=problem, resolved=resolved)
    module.exit_json(changed=False, resolved=resolved)


if __name__ == "__main__":
    main()
