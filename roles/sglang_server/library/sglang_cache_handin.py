#!/usr/bin/python
"""Ansible module: one replica's fetched autotune cache becomes the fleet's, whole or not at all."""

from __future__ import annotations

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_cache_fleet import hand_in

DOCUMENTATION = r"""
---
module: sglang_cache_handin
short_description: Move a replica's fetched FlashInfer autotune cache into the fleet's, on the controller
description:
  - Run on the controller (delegate_to localhost) after ansible.builtin.fetch put one replica's rank
    files in I(staging).
  - The set is handed in only when it has a file for every TP rank and all are the same (SGLang
    discards a set whose ranks disagree); one rename, so I(dest) holds one replica's files or none.
  - Only a replica whose answers passed (I(proof)) hands in; the proof is kept as C(proof.json).
    Links in I(staging) are refused. An existing I(dest) is kept. I(staging) is removed after.
options:
  staging: {description: Where fetch put this replica's files., type: path, required: true}
  dest: {description: "The fleet's directory for this FlashInfer version, SM and key.", type: path, required: true}
  tp_size: {description: The replica's TP size (ranks expected)., type: int, required: true}
  proof:
    description: The replica's proof (versions, SM, key, the answer check's result); without passed answers nothing is handed in.
    type: dict
    required: true
"""


def main() -> None:
    module = AnsibleModule(argument_spec={"staging": {"type": "path", "required": True},
                                          "dest": {"type": "path", "required": True},
                                          "tp_size": {"type": "int", "required": True},
                                          "proof": {"type": "dict", "required": True}},
                           supports_check_mode=True)
    params = module.params
    result = hand_in(Path(params["staging"]), Path(params["dest"]), params["tp_size"], module.check_mode,
                     params["proof"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
