#!/usr/bin/python
"""Ansible module: write the fleet's autotune cache sets into a replica's cache, links refused."""

from __future__ import annotations

import grp
import pwd
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_cache_copy import write_sets

DOCUMENTATION = r"""
---
module: sglang_cache_push
short_description: Write FlashInfer autotune cache sets into a replica's SGLang cache
description:
  - Writes each set of I(sets) (from M(sglang_cache_sets)) to
    I(cache_dir)/flashinfer/autotune/I(flashinfer)/I(sm)/KEY/, a file only where its content differs,
    through a temporary file and a rename, mode 0644, directories 0755, owned by I(owner):I(group).
  - >-
    No link below I(cache_dir) is followed: one fails the task, naming it. Check mode writes nothing
    and reports what it would write.
options:
  cache_dir: {description: "The server's SGLANG_CACHE_DIR.", type: path, required: true}
  flashinfer: {description: The replica's FlashInfer version., type: str, required: true}
  sm: {description: "The replica's GPU SM (sm120).", type: str, required: true}
  sets: {description: Key -> rank file name -> content., type: dict, required: true}
  owner: {description: The service user., type: str, required: true}
  group: {description: The service group., type: str, required: true}
"""


def main() -> None:
    module = AnsibleModule(argument_spec={"cache_dir": {"type": "path", "required": True},
                                          "flashinfer": {"type": "str", "required": True},
                                          "sm": {"type": "str", "required": True},
                                          "sets": {"type": "dict", "required": True},
                                          "owner": {"type": "str", "required": True},
                                          "group": {"type": "str", "required": True}},
                           supports_check_mode=True)
    params = module.params
    try:
        uid = pwd.getpwnam(params["owner"]).pw_uid
        gid = grp.getgrnam(params["group"]).gr_gid
    except KeyError as error:
        module.fail_json(msg=f"no such user or group on this replica: {error}. Nothing was pushed.")
    try:
        written = write_sets(Path(params["cache_dir"]) / "flashinfer" / "autotune", params["flashinfer"],
                             params["sm"], params["sets"], uid, gid, module.check_mode)
    except (ValueError, OSError) as error:
        module.fail_json(msg=f"the fleet's autotune cache was not pushed whole: {error}")
    module.exit_json(changed=bool(written), written=written,
                     diff={"before": "", "after": "".join(f"{path}\n" for path in written)},
                     msg=f"pushed {len(written)} rank file(s)" if written else "the cache already holds the fleet's sets")


if __name__ == "__main__":
    main()
