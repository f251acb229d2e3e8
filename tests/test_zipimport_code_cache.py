"""The tests' compile cache for zip imports (tests/run_caches): the code read back is the code
compile() gives for those bytes and that path; any fault of the cache compiles as without it."""

from __future__ import annotations

import os
import sys
import zipfile
import zipimport
from pathlib import Path

from conftest import RUN_CACHE_HOOK, python_says

sys.path.insert(0, RUN_CACHE_HOOK)
import zipimport_code_cache as cache  # noqa: E402  (test infrastructure, not shipped: on PYTHONPATH in the tests)

SOURCE = b"def f():\n    def g():\n        raise ValueError('from g')\n    return g()\n\nVALUE = 42\n"


def compile_source(pathname: str, source: bytes):
    return compile(source, pathname, "exec", dont_inherit=True)


def test_a_hit_is_the_code_compile_gives_for_the_new_path(tmp_path):
    first = cache.compile_cached(str(tmp_path), compile_source, "/tmp/a/payload.zip/m.py", SOURCE)
    assert first == compile_source("/tmp/a/payload.zip/m.py", SOURCE)
    assert len(list(tmp_path.iterdir())) == 1
    calls = []
    second = cache.compile_cached(str(tmp_path), lambda *a: calls.append(a), "/tmp/b/payload.zip/m.py", SOURCE)
    assert not calls   # read back, not compiled
    assert second == compile_source("/tmp/b/payload.zip/m.py", SOURCE)
    inner = [c for c in second.co_consts if hasattr(c, "co_code")][0]
    nested = [c for c in inner.co_consts if hasattr(c, "co_code")][0]
    assert nested.co_filename == "/tmp/b/payload.zip/m.py"


def test_one_byte_more_is_another_entry(tmp_path):
    cache.compile_cached(str(tmp_path), compile_source, "m.py", SOURCE)
    changed = SOURCE.replace(b"42", b"43")
    code = cache.compile_cached(str(tmp_path), compile_source, "m.py", changed)
    namespace: dict = {}
    exec(code, namespace)
    assert namespace["VALUE"] == 43 and len(list(tmp_path.iterdir())) == 2


def test_a_corrupt_or_foreign_entry_is_compiled_again(tmp_path):
    for junk in (b"", b"\x00garbage", __import__("marshal").dumps(["not", "code"])):
        (tmp_path / cache.key(SOURCE)).write_bytes(junk)
        code = cache.compile_cached(str(tmp_path), compile_source, "m.py", SOURCE)
        assert code == compile_source("m.py", SOURCE)
    assert cache.read(str(tmp_path / cache.key(SOURCE))) == compile_source("m.py", SOURCE)   # rewritten whole


def test_a_cache_that_cannot_be_written_compiles_as_without_it(tmp_path):
    not_a_dir = tmp_path / "a_file"
    not_a_dir.write_text("")
    code = cache.compile_cached(str(not_a_dir / "cache"), compile_source, "m.py", SOURCE)
    assert code == compile_source("m.py", SOURCE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]   # no partial file left anywhere


def test_a_python_started_by_the_tests_imports_from_a_zip_through_the_cache(tmp_path):
    """As a module run does: PYTHONPATH from tests/conftest.py, a zip on sys.path; by default in ~/.cache."""
    assert RUN_CACHE_HOOK in os.environ["PYTHONPATH"].split(os.pathsep)
    for run in ("one", "two"):
        payload = tmp_path / run / "payload.zip"
        payload.parent.mkdir()
        with zipfile.ZipFile(payload, "w") as archive:
            archive.writestr("m.py", SOURCE)
        probe = ("import sys, traceback, zipimport; sys.path.insert(0, sys.argv[1]); import m\n"
                 "print(getattr(zipimport._compile_source, 'code_cache', None))\n"
                 "try:\n    m.f()\nexcept ValueError as e:\n    print(traceback.extract_tb(e.__traceback__)[-1].filename)\n")
        said = python_says(probe, str(payload), ZIPIMPORT_CODE_CACHE=str(tmp_path / "cache"))
        assert said.split("\n")[:2] == [str(tmp_path / "cache"), str(payload / "m.py")], said
    assert len(list((tmp_path / "cache").iterdir())) == 1
    default = python_says("import zipimport; print(zipimport._compile_source.code_cache)", ZIPIMPORT_CODE_CACHE=None)
    assert default == str(Path.home() / ".cache" / "sglang-deploy" / "zipimport-code")
    off = python_says("import zipimport; print(hasattr(zipimport._compile_source, 'code_cache'))",
                      ZIPIMPORT_CODE_CACHE="")
    assert off == "False"


def test_install_leaves_an_interpreter_without_the_hook_alone(monkeypatch):
    monkeypatch.delattr(zipimport, "_compile_source")
    assert cache.install("/nonexistent") is False
