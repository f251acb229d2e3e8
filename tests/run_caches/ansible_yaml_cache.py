"""A cache of the YAML that Ansible parses out of its own installed files on every run.

Test infrastructure only: never shipped, never on a target, never in a benchmark. Each
ansible-playbook process parses the same YAML of Ansible's own before its first task: the
collection loader's routing table (`ansible/config/ansible_builtin_runtime.yml`, through
`_meta_yml_to_dict`, which Ansible documents as a hook that other tools replace to cache its
output), the configuration definitions (`ansible/config/base.yml`) and the DOCUMENTATION of each
plugin it loads (its options). That was 0.29 CPU-s of a one-task run's 0.74 before its first task
on this project's 2-core test machines (cProfile), and the tests start about a thousand runs. This keeps each result once, keyed by
the exact input (its bytes, and for a tagged string its tags, as pickle writes them), the loader's
name and the Python and PyYAML versions (tests/run_caches/pickle_entries.py keeps the entries), and hands every call a fresh unpickled copy, so no caller
shares or sees another's objects. Only input read from the installed `ansible` and
`ansible_collections` packages is cached: a playbook, an inventory or a role's YAML is always
parsed as without the cache.

Installed by tests/run_caches/sitecustomize.py where PYTHONPATH names that folder (tests/
conftest.py for pytest and what it starts, scripts/dev.sh for ansible-lint and Molecule), with entries in
ANSIBLE_YAML_CACHE, by default ~/.cache/sglang-deploy/ansible-yaml, and off where that is empty.
Nothing is imported at start-up: the first import of `yaml` or of Ansible's collection finder
applies the hook. Any failure to read or write the cache, or an input it cannot key, parses as
without it.
"""

from __future__ import annotations

import os
import sys

from on_import import PatchOnImport
from pickle_entries import cached, digest

ENV = "ANSIBLE_YAML_CACHE"
DEFAULT = os.path.join(os.path.expanduser("~"), ".cache", "sglang-deploy", "ansible-yaml")
FINDER_MODULE = "ansible.utils.collection_loader._collection_finder"


_ROOTS: tuple[str, ...] = ()


def installed_roots() -> tuple[str, ...]:
    """The folders of the installed ansible and ansible_collections packages, found once ansible is
    imported (empty before)."""
    global _ROOTS
    if not _ROOTS:
        paths = [os.path.realpath(p) for p in getattr(sys.modules.get("ansible"), "__path__", None) or []]
        _ROOTS = tuple(os.path.join(p, "") for p in paths) + tuple(
            os.path.join(os.path.dirname(p), "ansible_collections", "") for p in paths)
    return _ROOTS


def is_installed(path: str | bytes | None) -> bool:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return isinstance(path, str) and os.path.realpath(path).startswith(installed_roots() or ("\0",))


def yaml_version() -> bytes:
    """PyYAML's version, part of every key: another version may parse the same bytes otherwise."""
    return getattr(sys.modules.get("yaml"), "__version__", "").encode()


def load_key(stream, loader) -> tuple[str | None, object]:
    """(the entry's name, the input to parse) of a yaml.load call, or (None, stream) if not cached."""
    import pickle

    # The loader is part of the key: another may parse the same bytes otherwise.
    name = f"{loader.__module__}.{loader.__qualname__}\0".encode() + yaml_version()
    if isinstance(stream, str) and type(stream) is not str:
        # A string Ansible tagged with its origin: a plugin's DOCUMENTATION or a doc fragment.
        origin = getattr(sys.modules.get("ansible._internal._datatag._tags"), "Origin", None)
        tag = origin.get_tag(stream) if origin is not None else None
        if tag is None or not is_installed(getattr(tag, "path", None)):
            return None, stream
        return digest(b"tagged", name, pickle.dumps(stream, protocol=5)), stream
    path = getattr(stream, "name", None)
    if hasattr(stream, "read") and not loader.__module__.startswith("ansible") and is_installed(path):
        # A file of Ansible's own read with a plain loader (config/base.yml).
        data = stream.read()
        return digest(b"file", name, os.fsencode(path), data if isinstance(data, bytes) else data.encode()), data
    return None, stream


def cache_yaml_load(directory: str, yaml_module) -> None:
    original = yaml_module.load

    def load(stream, Loader):   # noqa: N803 (PyYAML's own keyword)
        try:
            key, stream = load_key(stream, Loader)
        except Exception:
            key = None
        return cached(directory, key, lambda: original(stream, Loader))

    load.ansible_yaml_cache = directory
    yaml_module.load = load


def cache_routing(directory: str, finder_module) -> None:
    original = getattr(finder_module, "_meta_yml_to_dict", None)
    if original is None:
        return

    def meta_yml_to_dict(yaml_string_data, content_id):
        data = yaml_string_data if isinstance(yaml_string_data, bytes) else str(yaml_string_data).encode()
        key = digest(b"routing", yaml_version(), repr(content_id).encode(), data)
        return cached(directory, key, lambda: original(yaml_string_data, content_id))

    finder_module._meta_yml_to_dict = meta_yml_to_dict


def install(directory: str | None = None) -> bool:
    """Cache through directory (else ANSIBLE_YAML_CACHE, else DEFAULT) from the first import of
    yaml and of Ansible's collection finder; False where that is empty or either is already imported."""
    directory = directory or os.environ.get(ENV, DEFAULT)
    if not directory:
        return False
    return PatchOnImport.add({
        "yaml": lambda module: cache_yaml_load(directory, module),
        FINDER_MODULE: lambda module: cache_routing(directory, module),
    })
