"""Rewrite a container config in place, and say beforehand whether that can work.

/etc/pve is pmxcfs, a cluster file system that refuses chmod and the
write-a-temp-file-then-rename-with-mode dance that most tools (Ansible's own
atomic_move included) use. Opening the existing file and rewriting its bytes
keeps its owner and mode and needs neither.
"""

from __future__ import annotations

import errno
import os


def write_problem(path: str) -> str | None:
    """Why path cannot be rewritten in place (read-only file system, no permission, immutable), or None.

    Opens the file for writing without changing a byte, so check mode fails where the real run would.
    """
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        return _why(path, exc)
    os.close(fd)
    return None


def _why(path: str, exc: OSError) -> str:
    hint = {
        errno.EROFS: "its file system is read-only (on Proxmox, /etc/pve is read-only while the node has no "
                     "quorum: `pvecm status`; elsewhere `findmnt -T PATH` shows the mount)",
        errno.EACCES: "permission denied (run the node's tasks as root: become)",
        errno.EPERM: "the file is immutable or append-only (`lsattr` shows it; `chattr -i` removes it)",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return f"cannot write {path}: {hint} [{errno.errorcode.get(exc.errno or 0, exc.errno)}]".replace("PATH", path)


def write_in_place(path: str, text: str) -> None:
    """Replace the content of an existing file without chmod, chown or rename.

    A failure raises ValueError naming the file and the cause; the file is opened before any byte
    is written, so a refused open leaves it as it was.
    """
    data = text.encode("utf-8")
    try:
        with open(path, "r+b") as handle:
            handle.seek(0)
            handle.write(data)
            handle.truncate(len(data))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise ValueError(_why(path, exc)) from None
