#!/usr/bin/python
"""Ansible module: the fleet's autotune cache sets that may go to a replica (controller, read-only)."""

from __future__ import annotations

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_cache_copy import read_sets

DOCUMENTATION = r"""
---
module: sglang_cache_sets
short_description: Read the fleet's FlashInfer autotune cache sets for one FlashInfer version and SM
description:
  - Run on the controller (delegate_to localhost). Reads I(fleet_dir)/I(flashinfer)/I(sm)/KEY/ without
    following links. A set goes out only when it is a whole cache (a rank file for every TP rank, all
    the same JSON) with a C(proof.json) saying its replica's answers passed; others are skipped and named.
  - Refuses a FlashInfer version or SM that is not one (a path part such as C(..)). Changes nothing.
options:
  fleet_dir: {description: "The controller's fleet cache directory.", type: path, required: true}
  flashinfer: {description: The replica's FlashInfer version., type: str, required: true}
  sm: {description: "The replica's GPU SM (sm120).", type: str, required: true}
  tp_size: {description: The replica's TP size (ranks expected)., type: int, required: true}
"""

RETURN = r"""
sets: {description: Key -> rank file name -> content., returned: success, type: dict}
skipped: {description: The sets not pushed, each with why., returned: success, type: list}
"""


def main() -> None:
    module = AnsibleModule(argument_spec={"fleet_dir": {"type": "path", "required": True},
                                          "flashinfer": {"type": "str", "required": True},
                                          "sm": {"type": "str", "required": True},
                                          "tp_size": {"type": "int", "required": True}},
                           supports_check_mode=True)
    params = module.params
    try:
        found = read_sets(Path(params["fleet_dir"]), params["flashinfer"], params["sm"], params["tp_size"])
    except (ValueError, OSError) as error:
        module.fail_json(msg=f"the fleet's autotune cache cannot be pushed: {error}. Nothing was pushed.")
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
