"""Versioned SGLang virtualenvs: what is kept, which is current, what to switch to.

Layout under a root (default /opt/sglang):

    venvs/<name>/                 one virtualenv per install
    venvs/<name>/sglang-manifest.json   what was asked, what was resolved, when
    current -> venvs/<name>       the install the service runs

A virtualenv without a manifest, named as venv_name names installs, is an install
that never finished: it is never a rollback target and is pruned. A directory
under venvs/ named otherwise is not the module's and is never removed. All
decisions live here so that tests can call them directly; the role only acts on
them.

Installs go through uv (default) or pip. With uv, every virtualenv is filled
from one cache under the root (same filesystem, so files are hardlinked):
pruning removes virtualenvs, never the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

MANIFEST = "sglang-manifest.json"
# The names venv_name makes: SOURCE-LABEL-REQUESTID, plus -YYYYmmddHHMMSS for an upgrade.
VENV_NAME = re.compile(r"(?:pypi|nightly|git)-[A-Za-z0-9._-]+-[0-9a-f]{8}(?:-[0-9]{14})?")
UV_CACHE = "cache/uv"
UV_TOOL = "tools/uv"


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
    def unfinished(self) -> bool:
        """An install a killed or failed run left without its manifest (a name venv_name makes)."""
        return not self.complete and bool(VENV_NAME.fullmatch(self.name))

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

    A directory without a manifest whose name venv_name does not make is left alone: it is not ours.

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
    return [v.path for v in venvs if v.name not in survivors and (v.complete or v.unfinished)]


def describe(venvs: list[Venv], current: Optional[str]) -> list[dict[str, Any]]:
    return [
        dict(asdict(v), complete=v.complete, current=v.name == current, installed_at=v.installed_at)
        for v in venvs
    ]


def after_plan(venvs: list[Venv], current: Optional[str], action: str, switch_to: str, keep: int) -> dict[str, Any]:
    """Current install and prune list once a planned rollback, reuse or no-op is done.

    For "install" the new virtualenv does not exist yet: the role scans again after it.
    """
    target = switch_to if action in ("rollback", "reuse", "none") and switch_to else current
    venv = next((v for v in venvs if v.name == target), None)
    prune = prune_list(venvs, target, keep)
    return {
        "current": target or "",
        "current_manifest": venv.manifest if venv else {},
        "prune": prune,
        "kept": kept_names(venvs, prune),
    }


def kept_names(venvs: list[Venv], prune: list[str]) -> list[str]:
    """Complete installs that stay after pruning, oldest first."""
    return [v.name for v in venvs if v.complete and v.path not in prune]


def _split(args: str) -> list[str]:
    return args.split()


def install_steps(request: dict[str, Any], upgrade: bool = False) -> list[dict[str, Any]]:
    """The install commands for a request: [{"name", "packages", "args"}], in order.

    `args` are the installer's options after `pip install` / `uv pip install`:
    pip and uv share the index options; uv adds what SGLang's install guide gives
    for it (--prerelease=allow, --index-strategy unsafe-best-match, so that an extra
    index is weighed against PyPI as pip does) and refreshes SGLang's index data on
    an upgrade so that a new nightly is seen.
    """
    uv = request.get("installer", "pip") == "uv"
    indexes = request.get("indexes", {})
    extra = _split(request.get("extra_args", ""))
    heavy = bool(request.get("heavy_dependencies"))
    pre = ["--prerelease=allow"] if uv else ["--pre"]
    best_match = ["--index-strategy", "unsafe-best-match"] if uv else []
    steps: list[dict[str, Any]] = []

    if heavy:
        torch = request.get("torch") or ""
        steps.append({
            "name": "torch from PyTorch's CUDA 13 index",
            "packages": [f"torch=={torch}" if torch else "torch"],
            "args": ["--index-url", indexes["torch"], *extra],
        })

    source = request["source"]
    if source == "pypi":
        spec = f"sglang=={request['version']}" if request.get("version") else "sglang"
    elif source == "nightly":
        spec = "sglang"
    else:
        url, _, ref = request["git"].rpartition("@")
        spec = f"git+{url}@{ref}#subdirectory=python"
    args: list[str] = [] if heavy else ["--no-deps"]
    extra_indexes: list[str] = []
    if source == "nightly":
        args += pre
        extra_indexes.append(indexes["nightly"])
    if heavy:
        extra_indexes.append(indexes["torch"])
    for url in extra_indexes:
        args += ["--extra-index-url", url]
    if extra_indexes:
        args += best_match
    if upgrade:
        args.append("--upgrade")
        if uv:
            args += ["--refresh-package", "sglang"]
    steps.append({"name": "SGLang", "packages": [spec], "args": args + extra})

    flashinfer = request.get("flashinfer") or ""
    if heavy and flashinfer:
        args = ["--no-deps", "--extra-index-url", indexes["flashinfer"]]
        if indexes.get("flashinfer_nightly"):
            args += [*pre, "--extra-index-url", indexes["flashinfer_nightly"]]
        steps.append({
            "name": "the three FlashInfer packages at one version",
            "packages": [f"{name}=={flashinfer}" for name in
                         ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")],
            "args": [*args, *best_match, *extra],
        })
    return steps


def uv_argv(root: str) -> list[str]:
    """`uv pip install` from the root's one cache, hardlinked, bytecode compiled (add --python VENV/bin/python)."""
    return [f"{root}/{UV_TOOL}/bin/uv", "pip", "install", "--cache-dir", f"{root}/{UV_CACHE}",
            "--link-mode", "hardlink", "--compile-bytecode"]


def missing_debs(dpkg_query_output: str, wanted: list[str]) -> list[str]:
    """Packages of `wanted` that `dpkg-query -W -f '${Package} ${Status}\\n'` does not show installed."""
    installed = set()
    for line in dpkg_query_output.splitlines():
        name, _, status = line.partition(" ")
        if status.strip() == "install ok installed":
            installed.add(name.split(":")[0])
    return [name for name in wanted if name not in installed]


def venv_name(request: dict[str, Any], upgrade: bool, now: time.struct_time) -> str:
    """`SOURCE-LABEL-REQUESTID`, plus the time for an upgrade (a second install of one request)."""
    source = request.get("source", "")
    label = request.get("version") if source == "pypi" else (request.get("git", "").rpartition("@")[2]
                                                             if source == "git" else "")
    request_id = hashlib.sha1(json.dumps(request, sort_keys=True).encode()).hexdigest()[:8]
    name = re.sub(r"[^A-Za-z0-9._-]", "-", f"{source}-{label or 'latest'}") + f"-{request_id}"
    return name + (time.strftime("-%Y%m%d%H%M%S", now) if upgrade else "")
