"""Entries of the run caches that keep Python values (ansible_yaml_cache, ansiballz_scan_cache):
one pickle file per key, written whole or not at all, read back as a fresh copy. Test
infrastructure only."""

from __future__ import annotations

import os
import sys

import zipimport_code_cache


def digest(*parts: bytes) -> str:
    """A key from parts (each length-prefixed, so no two lists of parts give the same bytes) and this
    Python's cache tag (its version: pickled values and syntax trees are per version)."""
    import hashlib   # here, not at start-up

    sha = hashlib.sha256(sys.implementation.cache_tag.encode())
    for part in parts:
        sha.update(len(part).to_bytes(8, "little") + part)
    return sha.hexdigest()


def read(path: str) -> tuple[bool, object]:
    """(True, the value) kept at path, or (False, None) where it is absent, unreadable or corrupt."""
    import pickle

    try:
        with open(path, "rb") as entry:
            return True, pickle.load(entry)
    except Exception:   # absent, unreadable, truncated or from another version: the caller parses
        return False, None


def write(directory: str, path: str, value) -> None:
    import pickle

    zipimport_code_cache.write(directory, path, value, lambda value, entry: pickle.dump(value, entry, protocol=5))


def path_of(directory: str, key: str) -> str:
    return os.path.join(directory, key + ".pickle")


def cached(directory: str, key: str | None, parse):
    """parse(), or its result kept under key in directory (always parsed where key is None)."""
    if key is None:
        return parse()
    path = path_of(directory, key)
    found, value = read(path)
    if found:
        return value
    value = parse()
    write(directory, path, value)
    return value
