"""The SGLang installs kept on a replica, read from the installs themselves (standard library only).

The sglang role's layout: ROOT/venvs/NAME/sglang-manifest.json for each complete install and
ROOT/current -> venvs/NAME. Read-only: the sglang role owns these files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional


def kept_installs(root: Path) -> dict[str, Any]:
    """current (name or None), current_version, and every complete install, oldest first."""
    installs = []
    venvs = root / "venvs"
    if venvs.is_dir():
        for entry in venvs.iterdir():
            if not entry.is_dir() or entry.is_symlink():
                continue
            try:
                manifest = json.loads((entry / "sglang-manifest.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue   # an install that never finished
            if isinstance(manifest, dict):
                resolved = manifest.get("resolved") if isinstance(manifest.get("resolved"), dict) else {}
                installs.append({"name": entry.name, "version": str(resolved.get("sglang", "")),
                                 "installed_at": str(manifest.get("installed_at", ""))})
    installs.sort(key=lambda item: (item["installed_at"], item["name"]))
    link = root / "current"
    current = Path(os.readlink(link)).name if link.is_symlink() else None
    version = next((item["version"] for item in installs if item["name"] == current), "")
    return {"current": current, "current_version": version, "installs": installs}


def install_of(installs: list[dict[str, Any]], version: str, prefer: Optional[str]) -> Optional[str]:
    """The install to go back to for a release: prefer (the one current was) when it is that
    release, else the newest kept install of it; None when none is kept."""
    names = [item["name"] for item in installs if item["version"] == version]
    if prefer in names:
        return prefer
    return names[-1] if names else None
