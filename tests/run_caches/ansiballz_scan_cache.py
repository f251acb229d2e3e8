"""A cache of what AnsiballZ's import scan reads in each source: its import statements.

Test infrastructure only: never shipped, never on a target, never in a benchmark. Before a module
first runs in a playbook run, ansible-core 2.19 builds its AnsiballZ payload: it parses the module
and every `module_utils` source it imports (`_compile_module_ast`) and walks each tree for import
statements (`ModuleDepFinder`), about 50 sources for the smallest module. It keeps the payload for
that run only, so each run builds it again: 0.16 CPU-s for `ansible.builtin.stat` and 0.30 for
this project's `sglang_server` on the 2-core test machines, about 15% of a playbook-level test's
CPU. This keeps, per source (its sha256 and the Python version), the tree that scan needs and
nothing else: its top-level imports and `METADATA` assignments in place, and every other import
statement, unchanged (relative ones stay relative), under one `if False:`. `ModuleDepFinder` finds
in it exactly the imports, and the required and optional ones, that it finds in the whole tree (a
top-level import is required, any other optional), and `_get_module_metadata` the same metadata.
The payload is built from the sources as before: only the parse and the walk are skipped.

Applied only to ansible-core 2.19, whose scan this describes (2.21 also reads top-level
assignments for module embedding): on any other version nothing is patched. Installed by
tests/run_caches/sitecustomize.py, with entries in ANSIBALLZ_SCAN_CACHE, by default
~/.cache/sglang-deploy/ansiballz-scan, and off where that is empty. A fault of the cache parses as
without it.
"""

from __future__ import annotations

import os

from on_import import PatchOnImport
from pickle_entries import digest, path_of, read, write

ENV = "ANSIBALLZ_SCAN_CACHE"
DEFAULT = os.path.join(os.path.expanduser("~"), ".cache", "sglang-deploy", "ansiballz-scan")
MODULE = "ansible.executor.module_common"


def is_metadata(node) -> bool:
    import ast   # here, not at start-up: most processes never build a payload

    return (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "METADATA")


def nested_imports(tree) -> list:
    """Every import statement below the top level, as ModuleDepFinder reaches them (list fields)."""
    import ast

    found: list = []

    def walk(node) -> None:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, (ast.Import, ast.ImportFrom)):
                        if node is not tree:
                            found.append(item)
                    elif isinstance(item, ast.AST):
                        walk(item)

    walk(tree)
    return found


def scanned(tree):
    """The part of tree (an ast.Module) that the import scan and the metadata read see."""
    import ast

    body = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)) or is_metadata(node)]
    nested = nested_imports(tree)
    if nested:
        body.append(ast.If(test=ast.Constant(False), body=nested, orelse=[]))
    return ast.Module(body=body, type_ignores=[])


def cache_scan(directory: str, module_common) -> None:
    import ansible.release

    original = getattr(module_common, "_compile_module_ast", None)
    if original is None or not ansible.release.__version__.startswith("2.19."):
        return

    def compile_module_ast(module_name, source_code):
        data = source_code if isinstance(source_code, bytes) else str(source_code).encode()
        path = path_of(directory, digest(b"ansiballz-scan", data))
        found, tree = read(path)
        if found:
            return tree
        tree = original(module_name, source_code)
        write(directory, path, scanned(tree))
        return tree   # a miss hands on the whole tree it parsed

    compile_module_ast.ansiballz_scan_cache = directory
    compile_module_ast.original = original
    module_common._compile_module_ast = compile_module_ast


def install(directory: str | None = None) -> bool:
    """Cache through directory (else ANSIBALLZ_SCAN_CACHE, else DEFAULT) from the first import of
    ansible.executor.module_common; False where that is empty or it is already imported."""
    directory = directory or os.environ.get(ENV, DEFAULT)
    if not directory:
        return False
    return PatchOnImport.add({MODULE: lambda module: cache_scan(directory, module)})
