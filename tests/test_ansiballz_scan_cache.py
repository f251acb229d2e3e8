"""The tests' cache of AnsiballZ's import scan (tests/run_caches): the tree kept for a source gives
ansible-core's scan exactly what the whole tree gives, on every source a payload can hold here."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO, RUN_CACHE_HOOK, python_says

import ansible
import ansible.release
import ansible_collections.community.general as community_general
from ansible.executor import module_common

sys.path.insert(0, RUN_CACHE_HOOK)
import ansiballz_scan_cache as cache  # noqa: E402  (test infrastructure, not shipped: on PYTHONPATH in the tests)

ORIGINAL = getattr(module_common._compile_module_ast, "original", module_common._compile_module_ast)


def sources() -> list[tuple[str, Path, bool]]:
    """(dotted name, file, is a package init) of the module_utils sources that a payload built here
    holds (ansible-core's and community.general's) and this project's modules and module_utils."""
    found = []
    for root, prefix in ((Path(ansible.__file__).parent / "module_utils", "ansible.module_utils"),
                         (Path(list(community_general.__path__)[0]) / "plugins" / "module_utils",
                          "ansible_collections.community.general.plugins.module_utils")):
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            package = parts[-1] == "__init__"
            found.append((".".join((prefix, *(parts[:-1] if package else parts))), path, package))
    for path in sorted(REPO.glob("roles/*/library/*.py")) + sorted(REPO.glob("roles/*/module_utils/*.py")):
        found.append((f"ansible.module_utils.{path.stem}" if path.parent.name == "module_utils" else
                      f"ansible.legacy.{path.stem}", path, False))
    return found


def scan(name: str, tree, package: bool) -> tuple:
    finder = module_common.ModuleDepFinder(name, tree, package)
    return finder.submodules, finder.optional_imports, module_common._get_module_metadata(tree)


def test_the_kept_tree_gives_the_scan_what_the_whole_tree_gives():
    checked = optional = relative = 0
    for name, path, package in sources():
        source = path.read_bytes()
        try:
            whole = ORIGINAL(name, source)
        except Exception:   # a file this Python cannot parse is refused by the build, cached or not
            continue
        expected = scan(name, whole, package)
        assert scan(name, cache.scanned(whole), package) == expected, path
        checked += 1
        optional += bool(expected[1])
        relative += b"from ." in source
    # The corpus holds what makes the scan differ: optional (try/except, nested) and relative imports.
    assert checked > 300 and optional > 10 and relative > 10, (checked, optional, relative)


def test_a_hit_is_the_kept_tree_a_miss_the_whole_one(tmp_path):
    module = SimpleNamespace(_compile_module_ast=ORIGINAL)
    cache.cache_scan(str(tmp_path), module)
    source = (REPO / "roles/sglang_server/library/sglang_server.py").read_bytes()
    first = module._compile_module_ast("sglang_server", source)
    assert ast.dump(first) == ast.dump(ORIGINAL("sglang_server", source))
    assert len(list(tmp_path.iterdir())) == 1
    second = module._compile_module_ast("sglang_server", source)
    assert ast.dump(second) == ast.dump(cache.scanned(first)) != ast.dump(first)
    assert scan("ansible.legacy.sglang_server", second, False) == scan("ansible.legacy.sglang_server", first, False)
    changed = module._compile_module_ast("sglang_server", source + b"\nimport ansible.module_utils.six\n")
    assert ("ansible", "module_utils", "six") in scan("x", changed, False)[0]   # another source, another entry
    for entry in tmp_path.iterdir():   # a corrupt entry: parsed again, whole
        entry.write_bytes(b"junk")
    assert ast.dump(module._compile_module_ast("sglang_server", source)) == ast.dump(first)


def test_another_ansible_core_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(ansible.release, "__version__", "2.21.5")
    module = SimpleNamespace(_compile_module_ast=ORIGINAL)
    cache.cache_scan(str(tmp_path), module)
    assert module._compile_module_ast is ORIGINAL


@pytest.mark.skipif(not ansible.release.__version__.startswith("2.19."), reason="the cache applies to 2.19 only")
def test_a_python_started_by_the_tests_scans_through_the_cache(tmp_path):
    assert RUN_CACHE_HOOK in os.environ["PYTHONPATH"].split(os.pathsep)
    probe = ("from ansible.executor import module_common as m\n"
             "print(getattr(m._compile_module_ast, 'ansiballz_scan_cache', None))\n")
    assert python_says(probe, ANSIBALLZ_SCAN_CACHE=str(tmp_path / "cache")) == str(tmp_path / "cache")
    default = python_says(probe, ANSIBALLZ_SCAN_CACHE=None)
    assert default == str(Path.home() / ".cache" / "sglang-deploy" / "ansiballz-scan")
    assert python_says(probe, ANSIBALLZ_SCAN_CACHE="") == "None"
