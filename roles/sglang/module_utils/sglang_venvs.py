"""Versioned SGLang virtualenvs: what is kept, which is current, what to switch to.

Layout under a root (default /opt/sglang):

    venvs/<name>/                 one virtualenv per install
    venvs/<name>/sglang-manifest.json   what was asked, what was resolved, when
    current -> venvs/<name>       the install the service runs

A virtualenv without a manifest is an install that never finished: it is never
a rollback target and is pruned. All decisions live here so that tests can
call them directly; the role only acts on them.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

MANIFEST = "sglang-manifest.json"


class VenvError(Exception):
    """A request about the kept virtualenvs that cannot be met; the message says why."""


@dataclass
class Venv:
    name: str
    path: str
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return bool(self.manifest)

    @property
    def installed_at(self) -> str:
        return str(self.manifest.get("installed_at", ""))


def read_manifest(venv: Path) -> dict[str, Any]:
    try:
        data = json.loads((venv / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def scan(root: str | Path) -> tuple[list[Venv], Optional[str]]:
    """Kept virtualenvs, oldest first, and the name `current` points at (None if unset)."""
    root = Path(root)
    venvs_dir = root / "venvs"
    found: list[Venv] = []
    if venvs_dir.is_dir():
        for entry in venvs_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                found.append(Venv(entry.name, str(entry), read_manifest(entry)))
    found.sort(key=lambda v: (v.installed_at, v.name))
    current = None
    link = root / "current"
    if link.is_symlink():
        current = Path(os.readlink(link)).name
    return found, current


def find_matching(venvs: list[Venv], request: dict[str, Any]) -> Optional[Venv]:
    """The newest complete virtualenv installed for exactly this request."""
    matches = [v for v in venvs if v.complete and v.manifest.get("request") == request]
    return matches[-1] if matches else None


def rollback_target(venvs: list[Venv], current: Optional[str], to: str = "") -> Venv:
    """The install to switch back to: `to` by name, else the newest one older than current."""
    complete = [v for v in venvs if v.complete]
    kept = ", ".join(f"{v.name} ({v.manifest.get('resolved', {}).get('sglang', '?')})" for v in complete) or "none"
    if to:
        for venv in complete:
            if venv.name == to:
                return venv
        raise VenvError(
            f"no complete SGLang install named {to!r} to roll back to. Kept installs: {kept}. "
            "Set sglang_rollback_to to one of them."
        )
    names = [v.name for v in complete]
    if current not in names:
        raise VenvError(
            f"cannot roll back: current points at {current!r}, which is not a complete install. "
            f"Kept installs: {kept}. Set sglang_rollback_to to one of them."
        )
    index = names.index(current)
    if index == 0:
        raise VenvError(
            f"cannot roll back: {current} is the oldest kept install. Kept installs: {kept}."
        )
    return complete[index - 1]


def plan_install(
    venvs: list[Venv],
    current: Optional[str],
    request: dict[str, Any],
    upgrade: bool = False,
    rollback: bool = False,
    rollback_to: str = "",
) -> tuple[str, str]:
    """What to do for this run: ("rollback" | "reuse" | "install" | "none", install to switch to).

    A current install made for the request stays, even when a newer one for the
    same request exists: that is where a rolled-back nightly must stay.
    """
    if rollback or rollback_to:
        return "rollback", rollback_target(venvs, current, rollback_to).name
    if upgrade:
        return "install", ""
    current_venv = next((v for v in venvs if v.name == current and v.complete), None)
    if current_venv and current_venv.manifest.get("request") == request:
        return "none", current_venv.name
    matching = find_matching(venvs, request)
    if matching:
        return "reuse", matching.name
    return "install", ""


def prune_list(venvs: list[Venv], current: Optional[str], keep: int) -> list[str]:
    """Paths to delete: unfinished installs, and complete ones beyond the newest `keep`.

    The current install and the one before it are never deleted, whatever `keep` says,
    so that a rollback target always exists.
    """
    keep = max(keep, 1)
    complete = [v for v in venvs if v.complete]
    protected = {current}
    names = [v.name for v in complete]
    if current in names and names.index(current) > 0:
        protected.add(names[names.index(current) - 1])
    survivors = {v.name for v in complete[-keep:]} | protected
    return [v.path for v in venvs if v.name not in survivors]


def describe(venvs: list[Venv], current: Optional[str]) -> list[dict[str, Any]]:
    return [
        dict(asdict(v), complete=v.complete, current=v.name == current, installed_at=v.installed_at)
        for v in venvs
    ]
