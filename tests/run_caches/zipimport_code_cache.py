"""A compile cache for code that Python imports from a zip: the test machines' AnsiballZ payloads.

Test infrastructure only: never shipped, never on a production target, never in a benchmark.
Every module run gets its code as a zip (AnsiballZ) and Python's zipimport compiles each source
in it on every import; it never writes bytecode. `ansible.module_utils.basic` and what it imports
cost about 0.18 CPU-s of a module run's 0.3 on this project's 2-core test machines, and the tests
run thousands of modules. This keeps the compiled code of each source once, keyed by the source's
own bytes and the interpreter (cache tag and optimisation level), as ccache does for a compiler:
a source that differs in one byte is compiled again. What is read back is the code object that
compile() gave for those bytes, with the file name of this import put back (the zip's temporary
path differs each run), so a traceback names the file as without the cache.

In each Python that has tests/run_caches/sitecustomize.py on PYTHONPATH (tests/conftest.py
puts it there for pytest and what it starts, scripts/dev.sh for ansible-lint and Molecule), keeping
its entries in ZIPIMPORT_CODE_CACHE, by default ~/.cache/sglang-deploy/zipimport-code, and off where
that is empty; and always in the test image (scripts/build-base-image.sh, a .pth file naming its own
directory). Any failure to read or write the cache compiles as without it: a read-only or full disk,
a corrupt entry, an interpreter without zipimport._compile_source.
"""

from __future__ import annotations

import marshal
import os
import sys
import zipimport
from types import CodeType

ENV = "ZIPIMPORT_CODE_CACHE"
DEFAULT = os.path.join(os.path.expanduser("~"), ".cache", "sglang-deploy", "zipimport-code")


def key(source: bytes) -> str:
    """The cache entry's name: the source's sha256, the interpreter's cache tag and -O level."""
    import hashlib   # here, not at start-up: most processes never import from a zip

    digest = hashlib.sha256(source).hexdigest()
    return f"{digest}.{sys.implementation.cache_tag}.O{sys.flags.optimize}.code"


def with_filename(code: CodeType, filename: str) -> CodeType:
    """code and every code object inside it, naming filename."""
    consts = tuple(with_filename(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def read(path: str) -> CodeType | None:
    try:
        with open(path, "rb") as entry:
            code = marshal.load(entry)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None


def write(directory: str, path: str, value, dump=marshal.dump) -> None:
    """dump(value) into path in directory, whole or not at all; a fault leaves nothing behind."""
    partial = f"{path}.{os.getpid()}.partial"
    try:
        os.makedirs(directory, exist_ok=True)
        with open(partial, "wb") as entry:
            dump(value, entry)
        os.replace(partial, path)   # whole or absent: never a half-written entry under the key
    except Exception:   # the disk, or a value dump cannot write
        try:
            os.unlink(partial)
        except OSError:
            pass


def compile_cached(directory: str, compile_source, pathname: str, source: bytes) -> CodeType:
    """What compile_source(pathname, source) returns, from the cache when it holds these bytes."""
    path = os.path.join(directory, key(source))
    code = read(path)
    if code is not None:
        return with_filename(code, pathname)
    code = compile_source(pathname, source)
    write(directory, path, code)
    return code


def install(directory: str | None = None) -> bool:
    """Route zipimport's compile through the cache in directory (else ZIPIMPORT_CODE_CACHE, else
    DEFAULT); False where that is empty or this interpreter has no such hook."""
    directory = directory or os.environ.get(ENV, DEFAULT)
    original = getattr(zipimport, "_compile_source", None)
    if not directory or original is None or getattr(original, "code_cache", None):
        return False

    def cached(pathname, source):
        return compile_cached(directory, original, pathname, source)

    cached.code_cache = directory
    zipimport._compile_source = cached
    return True
