"""Where the benchmark writes on the controller and the target: checked first, written whole.

Check mode and a real run ask the same question of a directory (is it one,
can it be written or created, is its file system read-only), so `--check`
fails where the run would. Files are written to temporaries beside their
targets and renamed only once every one of them is complete.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Optional


class OutputError(Exception):
    """An output that cannot be written; the message names the path."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symlink")):
        if test(mode):
            return name
    return "special file"


def _unwritable(directory: Path) -> Optional[str]:
    """Why files cannot be created in this existing directory, or None."""
    try:
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError as exc:
        return f"cannot be inspected ({exc.strerror})"
    if read_only:
        return "is on a read-only file system"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"is not writable by uid {os.geteuid()}"
    return None


def dir_problem(directory: Path, files: tuple[str, ...] = ()) -> Optional[str]:
    """Why `directory` (and these files in it) cannot be written or created, or None."""
    try:
        info = os.stat(directory)
    except (FileNotFoundError, NotADirectoryError):
        info = None
    except OSError as exc:
        return f"{directory} cannot be inspected ({exc.strerror})"
    if info is None:
        ancestor = directory.parent
        while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        try:
            mode = os.stat(ancestor).st_mode
        except OSError as exc:
            return f"{directory} cannot be created: {ancestor} cannot be inspected ({exc.strerror})"
        if not stat.S_ISDIR(mode):
            return f"{directory} cannot be created: {ancestor} is a {_kind(mode)}, not a directory"
        problem = _unwritable(ancestor)
        return f"{directory} cannot be created: {ancestor} {problem}" if problem else None
    if not stat.S_ISDIR(info.st_mode):
        return f"{directory} is a {_kind(info.st_mode)}, not a directory"
    problem = _unwritable(directory)
    if problem:
        return f"{directory} {problem}"
    for name in files:
        path = directory / name
        if os.path.lexists(path):
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                return f"{path} is a {_kind(mode)}; expected a file the report replaces"
    return None


def changed_files(files: dict[Path, bytes]) -> list[Path]:
    """The files whose content differs from what is wanted (absent ones included)."""
    changed = []
    for path, data in files.items():
        try:
            same = os.path.isfile(path) and not os.path.islink(path) and path.read_bytes() == data
        except OSError as exc:
            raise OutputError(f"{path}: cannot be read ({exc.strerror})") from None
        if not same:
            changed.append(path)
    return changed


def write_all(files: dict[Path, bytes], mode: int = 0o644) -> list[Path]:
    """Write the changed files: every temporary complete before the first rename; none left on error."""
    changed = changed_files(files)
    temps: dict[Path, str] = {}
    renamed: list[str] = []
    path = None
    try:
        for path in changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor, temps[path] = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.")
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(files[path])
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temps[path], mode)
        for path, temp in temps.items():
            os.replace(temp, path)
            renamed.append(str(path))
    except OSError as exc:
        for temp in temps.values():
            if os.path.lexists(temp):
                os.unlink(temp)
        done = f"; {', '.join(renamed)} was replaced already" if renamed else "; nothing was written"
        raise OutputError(f"{path}: cannot be written ({exc.strerror}){done}") from None
    return changed
