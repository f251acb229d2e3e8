"""The model store on the node: layout, the Hub's tree as data, checks, the digest manifest.

No huggingface_hub here (model_hub.py talks to the Hub): these are plain functions over files
and dicts, tested by pytest. The layout, under the store root (sglang_model_dir):

    ROOT/ORG--NAME/COMMIT/...            the repo's files at that commit, final names only
    ROOT/ORG--NAME/COMMIT/.sglang-model.json   the digest manifest (what was checked, when)
    ROOT/ORG--NAME/current -> COMMIT     switched only once COMMIT is complete and checked
    ROOT/ORG--NAME/.partial/COMMIT/PATH.incomplete   a download under way (resumed by Range)
    ROOT/ORG--NAME/.lock                 one run at a time (flock; a kill releases it)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

MANIFEST = ".sglang-model.json"
CURRENT = "current"
PARTIAL = ".partial"
SUFFIX = ".incomplete"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\Z")
REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,199}\Z")
CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class HubFile:
    """One file of the Hub's tree: its path, size, LFS sha256 (large files) and git blob id."""

    path: str
    size: int
    sha256: Optional[str]
    blob_id: str

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "blob_id": self.blob_id}


def input_problems(repo: str, revision: str, root: str, verify: str, source: str) -> list[str]:
    """What is wrong with the request, each item saying what was expected and what was found."""
    problems = []
    if not REPO_RE.match(repo or "") or ".." in repo:
        problems.append(f"sglang_model_repo={repo!r} is not a Hub repo id ORG/NAME (e.g. nvidia/GLM-5-NVFP4)")
    if not REVISION_RE.match(revision or "") or ".." in revision:
        problems.append(f"sglang_model_revision={revision!r} is not a commit hash (40 hex digits), branch or tag")
    if not root or not os.path.isabs(root) or os.path.normpath(root) == "/":
        problems.append(f"sglang_model_dir={root!r} must be an absolute directory on the node's storage, not /")
    if verify not in ("cheap", "full"):
        problems.append(f"sglang_model_verify={verify!r} must be cheap or full")
    if source and not os.path.isabs(source):
        problems.append(f"sglang_model_source={source!r} must be empty (the Hub) or an absolute directory")
    return problems


def safe_relpath(path: str) -> bool:
    """A tree path we may write under the commit folder: relative, no .., no hidden top file of ours."""
    parts = path.split("/")
    return (bool(path) and not path.startswith("/") and "" not in parts and ".." not in parts
            and "." not in parts and path not in (MANIFEST, CURRENT) and not path.startswith(PARTIAL))


def repo_folder(repo: str) -> str:
    return repo.replace("/", "--")


def paths(root: str, repo: str, commit: str) -> dict[str, str]:
    base = os.path.join(root, repo_folder(repo))
    return {"base": base, "final": os.path.join(base, commit), "partial": os.path.join(base, PARTIAL, commit),
            "current": os.path.join(base, CURRENT), "lock": os.path.join(base, ".lock")}


def git_blob_sha1(path: str) -> str:
    """The git blob id of a file (the Hub's oid for files not in LFS)."""
    digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())  # noqa: S324 - git's own id
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_of(path: str, tick: Optional[Callable[[int], None]] = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
            if tick:
                tick(len(chunk))
    return digest.hexdigest()


def content_problem(path: str, entry: HubFile, tick: Optional[Callable[[int], None]] = None) -> Optional[str]:
    """Why the file at path is not the Hub's file (size, then sha256 or git blob id), or None."""
    size = os.path.getsize(path)
    if size != entry.size:
        return f"{entry.path}: {size} bytes, the Hub's tree says {entry.size}"
    if entry.sha256:
        found = sha256_of(path, tick)
        if found != entry.sha256:
            return f"{entry.path}: sha256 {found}, the Hub's tree says {entry.sha256}"
        return None
    found = git_blob_sha1(path)
    if tick:
        tick(size)
    if found != entry.blob_id:
        return f"{entry.path}: git blob id {found}, the Hub's tree says {entry.blob_id}"
    return None


def read_manifest(final: str) -> dict[str, Any]:
    """The recorded manifest of a commit folder, or {} when absent or unreadable (then nothing is trusted)."""
    try:
        with open(os.path.join(final, MANIFEST), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else {}


def write_manifest(final: str, manifest: dict[str, Any]) -> None:
    """Write the manifest atomically (temp file, fsync, rename): a kill leaves the old or the new one."""
    target = os.path.join(final, MANIFEST)
    temp = target + ".tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temp, 0o644)
    os.replace(temp, target)


def tree_from_manifest(manifest: dict[str, Any]) -> list[HubFile]:
    return [HubFile(path, int(item["size"]), item.get("sha256"), str(item.get("blob_id", "")))
            for path, item in sorted(manifest.get("files", {}).items())]


def recorded_ok(final: str, entry: HubFile, record: Optional[dict[str, Any]]) -> bool:
    """The cheap check: the file is there at the Hub's size and as it was when it was hashed."""
    path = os.path.join(final, entry.path)
    try:
        stat = os.stat(path)
    except OSError:
        return False
    return (record is not None and stat.st_size == entry.size == int(record.get("size", -1))
            and record.get("sha256") == entry.sha256 and record.get("blob_id") == entry.blob_id
            and int(record.get("mtime_ns", -1)) == stat.st_mtime_ns and record.get("verified") is True)


@dataclass
class Plan:
    """What a run has to do for one commit: files already good, files to fetch, bytes."""

    good: list[str] = field(default_factory=list)
    to_check: list[HubFile] = field(default_factory=list)
    to_fetch: list[HubFile] = field(default_factory=list)
    staged_bytes: int = 0
    total_bytes: int = 0

    @property
    def bytes_needed(self) -> int:
        """What the fetch still has to write to disk (a staged part counts as written)."""
        return max(sum(item.size for item in self.to_fetch) - self.staged_bytes, 0)


def plan(tree: Iterable[HubFile], final: str, partial: str, manifest: dict[str, Any], full: bool) -> Plan:
    """Sort the tree's files: recorded and unchanged (good), present but unrecorded or full (to_check), absent."""
    result = Plan()
    records = manifest.get("files", {})
    for entry in tree:
        result.total_bytes += entry.size
        path = os.path.join(final, entry.path)
        if not full and recorded_ok(final, entry, records.get(entry.path)):
            result.good.append(entry.path)
        elif os.path.isfile(path) and not os.path.islink(path):
            result.to_check.append(entry)
        else:
            result.to_fetch.append(entry)
            staged = os.path.join(partial, entry.path + SUFFIX)
            if os.path.isfile(staged):
                result.staged_bytes += min(os.path.getsize(staged), entry.size)
    return result


def free_bytes(path: str) -> int:
    """Free bytes for an unprivileged writer on the file system holding path (its nearest existing parent)."""
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    stats = os.statvfs(probe)
    return stats.f_bavail * stats.f_frsize


def space_problem(root: str, needed: int, free: int, keep_free: int) -> Optional[str]:
    if free - needed >= keep_free:
        return None
    return (f"Not enough space on {root}: the fetch still needs {human(needed)} and "
            f"sglang_model_keep_free_gb asks for {human(keep_free)} left over, but only {human(free)} is free. "
            "Free space there or point sglang_model_dir at a larger file system; nothing was downloaded.")


def human(count: float) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} TiB"


def progress_line(done: int, total: int, rate: float, current: str) -> str:
    """`42.0% of 410.1 GiB, 512.3 MiB/s, 7 min 59 s left (model-00012-of-00083.safetensors)`."""
    percent = 100.0 * done / total if total else 100.0
    left = (total - done) / rate if rate > 0 else None
    eta = "time left unknown" if left is None else f"{int(left // 60)} min {int(left % 60)} s left"
    return f"{percent:.1f}% of {human(total)}, {human(rate)}/s, {eta}" + (f" ({current})" if current else "")


def link_current(base: str, commit: str) -> bool:
    """Point base/current at commit (a relative link, swapped atomically); True when it changed."""
    link = os.path.join(base, CURRENT)
    if os.path.islink(link) and os.readlink(link) == commit:
        return False
    temp = link + ".new"
    if os.path.lexists(temp):
        os.unlink(temp)
    os.symlink(commit, temp)
    os.replace(temp, link)
    return True
