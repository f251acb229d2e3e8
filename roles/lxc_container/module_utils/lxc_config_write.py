"""Rewrite a container config in place.

/etc/pve is pmxcfs, a cluster file system that refuses chmod and the
write-a-temp-file-then-rename-with-mode dance that most tools (Ansible's own
atomic_move included) use. Opening the existing file and rewriting its bytes
keeps its owner and mode and needs neither.
"""

from __future__ import annotations

import os


def write_in_place(path: str, text: str) -> None:
    """Replace the content of an existing file without chmod, chown or rename."""
    data = text.encode("utf-8")
    with open(path, "r+b") as handle:
        handle.seek(0)
        handle.write(data)
        handle.truncate(len(data))
        handle.flush()
        os.fsync(handle.fileno())
