"""The role's writes: what the gate's edit needs, and the log of the edit.

Both writes replace a file by renaming a new one into its directory: the gate's
edit (``ansible.builtin.lineinfile``) and the role's log. So a read-only mount,
an immutable file or directory, or a directory the user may not write makes
both fail. Asking the same questions in check mode makes ``--check`` fail where
a real run fails, and before any change in a real run.

The log holds what the file was before this role's edit. While pip's RECORD
lists the gate file it is only a log: when it cannot be written, ``write_log``
and ``remove_log`` return a warning instead of raising, so a full disk or a
file where the log directory should be never fails a patch or a rollback.
Without RECORD it is the reference a rollback reads.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import struct
import tempfile
from pathlib import Path
from typing import Any, Optional

FS_IOC_GETFLAGS = 0x80086601  # _IOR('f', 1, long), as lsattr asks
FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20


def _attribute_flags(path: Path) -> int:
    """The inode flags chattr sets (0 where the filesystem has none or they cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8))[:4])[0]
    except OSError:
        return 0
    finally:
        os.close(fd)


def replace_problem(path: Path) -> Optional[str]:
    """Why `path` cannot be replaced by a new file renamed into its directory; None when it can."""
    # ansible.builtin.lineinfile makes the edit, and its path option is of type path: Ansible
    # expands $NAME and a leading ~ in it, so the edit would go to (or miss at) another file.
    expanded = os.path.expanduser(os.path.expandvars(str(path)))
    if expanded != str(path):
        return (f"its path holds what Ansible's path options expand ($NAME, or a leading ~): "
                f"ansible.builtin.lineinfile, which makes the edit, would open {expanded} instead; "
                "install SGLang under a directory whose name has no $NAME or leading ~")
    directory = path.parent
    try:
        readonly = os.statvfs(directory).f_flag & os.ST_RDONLY
    except OSError as exc:
        return f"its directory {directory} cannot be read ({exc.strerror})"
    if readonly:
        return (f"{directory} is on a read-only mount; remount it read-write (mount -o remount,rw "
                "MOUNTPOINT), or install SGLang on a writable filesystem")
    for target in (path, directory):
        if not os.path.lexists(target):
            continue
        flags = _attribute_flags(target)
        for flag, name, letter in ((FS_IMMUTABLE_FL, "immutable", "i"), (FS_APPEND_FL, "append-only", "a")):
            if flags & flag:
                return f"{target} is {name} (lsattr shows '{letter}'); clear it with chattr -{letter} {target}"
    uid = os.geteuid()
    if not os.access(directory, os.W_OK | os.X_OK):
        return (f"{directory} is not writable by uid {uid} (mode {_mode(directory)}); run as its "
                "owner (become: true) or make it writable")
    if os.path.lexists(path) and not os.access(path, os.W_OK):
        return (f"{path} is read-only for uid {uid} (mode {_mode(path)}); run as its owner "
                f"(become: true) or make it writable (chmod u+w {path})")
    return None


def _mode(path: Path) -> str:
    info = path.stat()
    return f"{stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}"


def state_file_for(state_dir: str | Path, gate_file: str | Path) -> Path:
    """Where the log of this role's edit to gate_file lives (one name per real path)."""
    name = str(gate_file).strip("/").replace("/", "__")
    tag = hashlib.sha256(str(gate_file).encode("utf-8")).hexdigest()[:12]
    return Path(state_dir) / f"{name}.{tag}.json"


def read_log(state_file: Path) -> tuple[Optional[dict[str, Any]], str]:
    """(the log, ""); (None, "") when there is none; (None, why) when it cannot be read."""
    if not os.path.lexists(state_file):
        return None, ""
    if state_file.is_symlink() or not state_file.is_file():
        return None, f"{state_file} is not a regular file"
    try:
        log = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"{state_file} is not readable JSON ({exc})"
    if not isinstance(log, dict):
        return None, f"{state_file} holds JSON that is not an object"
    return log, ""


def log_text(fields: dict[str, Any]) -> str:
    return json.dumps(fields, indent=4, sort_keys=True) + "\n"


def log_problem(state_dir: Path, state_file: Path) -> Optional[str]:
    """Why the log `state_file` in `state_dir` cannot be written; None when it can."""
    if os.path.lexists(state_dir) and not state_dir.is_dir():
        return f"sglang_autotune_state_dir={state_dir} is not a directory"
    if os.path.lexists(state_file) and (state_file.is_symlink() or not state_file.is_file()):
        return f"{state_file} is not a regular file; remove it to get the log back"
    existing = state_dir
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        return f"sglang_autotune_state_dir={state_dir} lies under {existing}, which is not a directory"
    return replace_problem(state_file if existing == state_dir else existing / "new")


def _warning(state_file: Path, doing: str, why: str, decides: bool) -> str:
    use = ("Without a RECORD listing the gate file this log is what a rollback reads, so fix "
           "this before rolling back." if decides else
           "It is only a log (pip's RECORD decides), so the edit stands and later runs work.")
    return f"The log {state_file} was not {doing}: {why}. {use}"


def write_log(state_dir: Path, state_file: Path, text: Optional[str], decides: bool = False,
              check: bool = False) -> tuple[bool, str]:
    """Write the log atomically: (changed, warning); a failure is a warning, never an exception.

    `text` None (check mode, before the edit it logs): only whether it could be written.
    """
    try:
        if state_file.is_file() and not state_file.is_symlink() and state_file.read_text(encoding="utf-8") == text:
            return False, ""
    except (OSError, UnicodeDecodeError):
        pass
    problem = log_problem(state_dir, state_file)
    if problem:
        return False, _warning(state_file, "written", problem, decides)
    if check or text is None:
        return True, ""
    temp = None
    try:
        state_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=state_dir, prefix=f".{state_file.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, state_file)
    except OSError as exc:
        if temp:
            try:
                os.unlink(temp)
            except OSError:
                pass
        return False, _warning(state_file, "written", f"{exc.strerror or exc}", decides)
    return True, ""


def remove_log(state_file: Path, check: bool = False) -> tuple[bool, str]:
    """Remove the log of an edit the file no longer carries: (changed, warning)."""
    if not os.path.lexists(state_file):
        return False, ""
    if state_file.is_dir() and not state_file.is_symlink():
        return False, _warning(state_file, "removed", "it is a directory; remove it by hand", False)
    problem = replace_problem(state_file)
    if problem:
        return False, _warning(state_file, "removed", problem, False)
    if check:
        return True, ""
    try:
        state_file.unlink()
    except OSError as exc:
        return False, _warning(state_file, "removed", f"{exc.strerror or exc}", False)
    return True, ""
