"""The keys SGLang's serving benchmark writes with --output-file, read from a real wheel's source."""

from __future__ import annotations

import ast
import zipfile

from conftest import sglang_wheel

BENCH_SOURCES = ("sglang/benchmark/serving.py", "sglang/bench_serving.py")


def benchmark_source(version: str) -> tuple[str, str]:
    """(member, text) of the benchmark implementation in the wheel (the newest location first)."""
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        names = set(wheel.namelist())
        for member in BENCH_SOURCES:
            if member in names:
                text = wheel.read(member).decode("utf-8")
                if "add_argument" in text:  # 0.5.23's bench_serving.py is a shim
                    return member, text
    raise AssertionError(f"no benchmark source in sglang {version}")


def result_keys(version: str) -> list[str]:
    """The literal keys of the `result = {...}` dict that holds max_concurrency."""
    _, text = benchmark_source(version)
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "result" for t in node.targets)):
            keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
            if "max_concurrency" in keys:
                return keys
    raise AssertionError(f"no result dict with max_concurrency in sglang {version}")
