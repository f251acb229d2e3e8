#!/usr/bin/python
"""Ansible module: the FlashInfer version and SM a replica's autotune cache is for (read-only)."""

from __future__ import annotations

import glob
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_cache_fleet import flashinfer_version, sm_name

DOCUMENTATION = r"""
---
module: sglang_cache_target
short_description: Read the FlashInfer version and GPU SM an SGLang install tunes for
description:
  - The FlashInfer version from the virtualenv's flashinfer_python dist-info, else the exact pin
    in the installed SGLang's METADATA; the SM from nvidia-smi's compute_cap unless I(sm) is given.
  - Never changes anything.
options:
  python: {description: The SGLang virtualenv's interpreter., type: path, required: true}
  sm: {description: The SM (sm120) where nvidia-smi cannot tell; empty asks nvidia-smi., type: str, default: ""}
"""


def main() -> None:
    module = AnsibleModule(argument_spec={"python": {"type": "path", "required": True},
                                          "sm": {"type": "str", "default": ""}},
                           supports_check_mode=True)
    venv = Path(module.params["python"]).parent.parent
    sites = glob.glob(str(venv / "lib" / "python3*" / "site-packages"))
    version, version_source = flashinfer_version(Path(sites[0])) if sites else ("", f"no site-packages in {venv}")
    sm, sm_source = module.params["sm"], "sglang_server_gpu_sm"
    if not sm:
        nvidia_smi = module.get_bin_path("nvidia-smi")
        if nvidia_smi:
            rc, out, _ = module.run_command([nvidia_smi, "--query-gpu=compute_cap", "--format=csv,noheader"])
            sm, sm_source = sm_name(out.splitlines()) if rc == 0 else ("", "nvidia-smi failed")
        else:
            sm_source = "no nvidia-smi here and sglang_server_gpu_sm is empty"
    module.exit_json(changed=False, flashinfer=version, flashinfer_source=version_source, sm=sm, sm_source=sm_source)


if __name__ == "__main__":
    main()
