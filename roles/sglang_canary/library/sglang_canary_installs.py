#!/usr/bin/python
"""Ansible module: the SGLang installs kept on a replica (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_canary_installs
short_description: Read the SGLang installs kept on a replica and which one is current (read-only)
description:
  - Reads C(ROOT/venvs/*/sglang-manifest.json) and the C(ROOT/current) link the sglang role keeps.
  - Changes nothing; the sglang role owns these files.
options:
  root: {description: The sglang role's root (sglang_root)., type: path, default: /opt/sglang}
attributes:
  check_mode: {support: full}
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Read the kept installs
  sglang_canary_installs:
    root: /opt/sglang
  register: installs
"""

RETURN = r"""
current: {description: The install C(current) points at (null when unset)., returned: always, type: str}
current_version: {description: Its resolved SGLang version (empty when unknown)., returned: always, type: str}
installs: {description: "Complete installs, oldest first: name, version, installed_at.", returned: always, type: list}
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_canary_kept import kept_installs


def main() -> None:
    module = AnsibleModule(argument_spec={"root": {"type": "path", "default": "/opt/sglang"}},
                           supports_check_mode=True)
    module.exit_json(changed=False, **kept_installs(Path(module.params["root"])))


if __name__ == "__main__":
    main()
