"""The fleet's autotune cache, pushed: what the controller may hand out, and the write on a replica.

read_sets runs on the controller: every path part comes from a checked value, nothing is read
through a link, and a set goes out only when it is a replica's whole cache (a file for every TP
rank, all the same JSON) with a proof that its replica's answers passed. write_sets runs on the
replica: below the cache root no link is followed, files go in through a temporary file and a
rename with the cache's own modes (0644 files, 0755 directories), owned by the service user.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from ansible.module_utils.sglang_cache_fleet import PROOF, RANK_FILE, complete_set_problem, proof_problem

FLASHINFER_RE = re.compile(r"[0-9][0-9A-Za-z+_-]*(\.[0-9A-Za-z+_-]+)*")
SM_RE = re.compile(r"sm[0-9]{2,4}")
KEY_RE = re.compile(r"[0-9A-Za-z_-]{1,128}")


def part_problem(flashinfer: str, sm: str) -> str:
    """Why the FlashInfer version or SM cannot name a cache directory ("" when both can)."""
    if not FLASHINFER_RE.fullmatch(flashinfer or ""):
        return f"the FlashInfer version {flashinfer!r} is not a version (digits, letters, . + _ -)"
    if not SM_RE.fullmatch(sm or ""):
        return f"the SM {sm!r} is not sm followed by digits (sm120, sm90)"
    return ""


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def read_set(key_dir: Path, tp_size: int) -> tuple[dict[str, str], str]:
    """One key directory's rank files (name -> text), or why it may not go out."""
    files: dict[str, bytes] = {}
    proof: Any = None
    for entry in sorted(os.listdir(key_dir)):
        mode = os.lstat(key_dir / entry).st_mode
        if not stat.S_ISREG(mode):
            return {}, f"{entry} is not a regular file (a link or a directory)"
        data = (key_dir / entry).read_bytes()
        if entry == PROOF:
            try:
                proof = json.loads(data)
            except ValueError:
                return {}, f"{PROOF} is not JSON"
        elif RANK_FILE.fullmatch(entry):
            files[entry] = data
        else:
            return {}, f"{entry} is not a rank file of SGLang's cache"
    problem = (complete_set_problem(files, tp_size) if files else "it holds no rank file") or proof_problem(proof)
    if problem:
        return {}, problem
    return {name: data.decode("utf-8") for name, data in files.items()}, ""


def read_sets(fleet_dir: Path, flashinfer: str, sm: str, tp_size: int) -> dict[str, Any]:
    """Every set the fleet may push for this FlashInfer version and SM, and the ones it skips."""
    problem = part_problem(flashinfer, sm)
    if problem:
        raise ValueError(problem)
    base = fleet_dir / flashinfer / sm
    sets: dict[str, dict[str, str]] = {}
    skipped: list[str] = []
    for path in (fleet_dir, fleet_dir / flashinfer, base):
        if path.is_symlink():
            raise ValueError(f"{path} is a link: the fleet's cache is read without following links")
    if not _real_dir(base):
        return {"sets": sets, "skipped": skipped, "base": str(base)}
    for key in sorted(os.listdir(base)):
        where = base / key
        if key.startswith("."):
            continue
        if not KEY_RE.fullmatch(key) or not _real_dir(where):
            skipped.append(f"{key}: not a cache key directory (a link, a file or an odd name)")
            continue
        files, why = read_set(where, tp_size)
        if why:
            skipped.append(f"{key}: {why}")
        else:
            sets[key] = files
    return {"sets": sets, "skipped": skipped, "base": str(base)}


def _no_link_below(root: Path, path: Path) -> None:
    """Refuse a link at root or at any part of path below it."""
    at = root
    for part in ("", *path.relative_to(root).parts):
        at = at / part if part else at
        if at.is_symlink():
            raise ValueError(f"{at} is a link: the cache is written without following links")


def write_sets(cache_root: Path, flashinfer: str, sm: str, sets: dict[str, dict[str, str]],
               uid: int, gid: int, check: bool) -> list[str]:
    """Write each set under cache_root/flashinfer/sm/key; the files it wrote (or would)."""
    problem = part_problem(flashinfer, sm)
    if problem:
        raise ValueError(problem)
    written: list[str] = []
    for key, files in sorted(sets.items()):
        if not KEY_RE.fullmatch(key):
            raise ValueError(f"the cache key {key!r} is not a key (letters, digits, _ -)")
        where = cache_root / flashinfer / sm / key
        _no_link_below(cache_root, where)
        for name, text in sorted(files.items()):
            if not RANK_FILE.fullmatch(name):
                raise ValueError(f"{name!r} is not a rank file name")
            target = where / name
            if target.is_symlink():
                raise ValueError(f"{target} is a link: the cache is written without following links")
            data = text.encode("utf-8")
            if target.is_file() and target.read_bytes() == data:
                continue
            written.append(str(target))
            if check:
                continue
            _make_dirs(where, uid, gid)
            fd, temp = tempfile.mkstemp(dir=where, prefix=".push-")
            try:
                os.write(fd, data)
                os.fchmod(fd, 0o644)
                os.fchown(fd, uid, gid)
            finally:
                os.close(fd)
            os.replace(temp, target)
    return written


def _make_dirs(where: Path, uid: int, gid: int) -> None:
    """Make where and its missing parents, 0755 and the service user's."""
    missing = []
    at = where
    while not at.exists():
        missing.append(at)
        at = at.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o755)
        os.chown(directory, uid, gid)
