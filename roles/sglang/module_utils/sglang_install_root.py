"""The install root as the target resolves it: not a system directory, a directory, writable.

The role's validate.yml checks the string the user gave; this checks the path it
reaches on the target (through any symlink), before anything is created there,
in check mode too, so that check mode fails where the real run would.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

# Directories that hold other things: old installs under the root are deleted when pruned.
SYSTEM_DIRECTORIES = frozenset([
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local",
    "/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/tmp",
])
# What the module writes under the root: each must be a directory where it exists.
OWN_DIRECTORIES = ("venvs", "tools", "cache")
LOCK = ".install.lock"
CURRENT = "current"
CURRENT_TMP = ".current.tmp"  # the link `current` is renamed from; a kill can leave it
# All the module makes directly under the root. An existing root holding anything else (a home,
# a shared data folder given by mistake) is refused: it would be made root's and pruned under.
# lost+found: a file system of its own mounted as the root (a dedicated disk) has it from mkfs.
ROOT_ENTRIES = frozenset([*OWN_DIRECTORIES, CURRENT, CURRENT_TMP, LOCK, "lost+found"])
SHOWN_FOREIGN = 3


def nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def root_problem(root: str) -> Optional[str]:
    """Why ROOT cannot hold SGLang's installs on this machine, or None."""
    resolved = Path(os.path.realpath(root))
    given = f"sglang_root={root}"
    if str(resolved) != os.path.normpath(root):
        given += f" (which resolves to {resolved} here)"
    if str(resolved) in SYSTEM_DIRECTORIES:
        return (f"{given} is a system directory: expected a directory of its own such as /opt/sglang; "
                "old installs under it are deleted when pruned. Nothing was changed. Set sglang_root to a "
                "directory that holds nothing else (a symlink to a system directory counts as that directory).")
    existing = nearest_existing(resolved)
    if not existing.is_dir():
        return (f"{given}: {existing} is a {'file' if existing.is_file() else 'non-directory'}, so the install "
                "root cannot be made there. Nothing was changed. Move it away or set sglang_root elsewhere.")
    if existing == resolved:
        problem = foreign_problem(given, resolved)
        if problem:
            return problem
    for name in OWN_DIRECTORIES:
        own = resolved / name
        if os.path.lexists(own) and not own.is_dir():
            return (f"{given}: {own} is not a directory (found a {'dangling symlink' if own.is_symlink() else 'file'}); "
                    f"the installs need it as a directory of their own. Nothing was changed. Move {own} away "
                    "and re-run.")
        if own.is_symlink() and os.path.realpath(own) in SYSTEM_DIRECTORIES:
            return (f"{given}: {own} leads to {os.path.realpath(own)}, a system directory; the installs write "
                    "(and venvs/ prunes) under it. Nothing was changed. Point it at a directory of its own.")
    for path in [existing, *(resolved / name for name in OWN_DIRECTORIES if (resolved / name).is_dir())]:
        if not os.access(path, os.W_OK):
            return (f"{given}: {path} is not writable here (a read-only file system or its permissions), so "
                    "nothing can be installed. Nothing was changed. Make it writable (remount it read-write) "
                    "or set sglang_root to a writable directory.")
    return None


def foreign_problem(given: str, root: Path) -> Optional[str]:
    """Why the existing ROOT is not the module's own (it holds entries the module does not make), or None."""
    try:
        foreign = sorted(name for name in os.listdir(root) if name not in ROOT_ENTRIES)
    except OSError as exc:
        return (f"{given}: cannot list {root} ({exc.strerror}), so whether it holds only SGLang's installs is "
                "unknown. Nothing was changed. Make it readable or set sglang_root to a new or empty directory.")
    if not foreign:
        return None
    shown = ", ".join(repr(name) for name in foreign[:SHOWN_FOREIGN])
    more = f" and {len(foreign) - SHOWN_FOREIGN} more" if len(foreign) > SHOWN_FOREIGN else ""
    return (f"{given} holds {shown}{more}, which the install module does not make there: expected a new or "
            f"empty directory, or one holding only {', '.join(sorted(ROOT_ENTRIES))} from an earlier deploy; "
            "the root is made root's (0755) and old installs under it are deleted when pruned. Nothing was "
            "changed. Set sglang_root to a new or empty directory of its own, such as /opt/sglang.")


def venv_problem(venv: Path) -> Optional[str]:
    """Why the new install's path cannot be used (something that is not a virtualenv is there), or None."""
    if os.path.lexists(venv) and (venv.is_symlink() or not venv.is_dir()):
        kind = "symlink" if venv.is_symlink() else "file"
        return (f"{venv} is a {kind}, not a virtualenv: the new install goes there and only installs belong "
                f"under {venv.parent}. Nothing was changed. Move {venv} away and re-run.")
    return None


def root_directories(root: Path) -> tuple[Path, Path]:
    """The directories the install module owns besides the installs: the root and its venvs/."""
    return root, root / "venvs"


def directory_changes(path: Path) -> list[str]:
    """What makes PATH the install module's own directory (root:root 0755); [] when it is one."""
    if not os.path.lexists(path):
        return ["absent"]
    st = path.stat()  # a link to a directory is that directory, as the file module follows it
    changes = [f"owner {st.st_uid}:{st.st_gid}"] if (st.st_uid, st.st_gid) != (0, 0) else []
    if stat.S_IMODE(st.st_mode) != 0o755:
        changes.append(f"mode {stat.S_IMODE(st.st_mode):04o}")
    return changes


def ensure_directories(root: Path, check: bool) -> list[dict[str, str]]:
    """The root and venvs/ made or put right (root:root 0755), after root_problem found nothing.

    Returns one diff per directory changed (in check mode, what would change, nothing made).
    """
    diffs = []
    for path in root_directories(root):
        changes = directory_changes(path)
        if not changes:
            continue
        diffs.append({"before_header": str(path), "after_header": str(path),
                      "before": f"{', '.join(changes)}\n", "after": "directory root:root 0755\n"})
        if check:
            continue
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chown(path, 0, 0)
        os.chmod(path, 0o755)
    return diffs
