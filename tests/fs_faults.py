"""Real filesystem faults for the tests: a read-only mount, a full disk, chattr flags.

Each is a context manager that undoes itself, so pytest can remove its tmp_path.
They need root (CAP_SYS_ADMIN for mounts, CAP_LINUX_IMMUTABLE for chattr +i/+a);
without it the test that asks is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"{' '.join(cmd)} failed here ({proc.stderr.strip()}): needs root")


@contextlib.contextmanager
def readonly_mount(path: Path) -> Iterator[Path]:
    """`path` (a directory) bound onto itself read-only."""
    _run("mount", "--bind", str(path), str(path))
    try:
        _run("mount", "-o", "remount,ro,bind", str(path))
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@contextlib.contextmanager
def full_disk(path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs on `path` (a directory), filled up: every new byte gets ENOSPC."""
    _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path))
    try:
        fd = os.open(path / ".fill", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@contextlib.contextmanager
def chattr(path: Path, flag: str) -> Iterator[Path]:
    """`path` with chattr +flag (i: immutable, a: append-only) for the block."""
    _run("chattr", f"+{flag}", str(path))
    try:
        yield path
    finally:
        subprocess.run(["chattr", f"-{flag}", str(path)], check=True)
