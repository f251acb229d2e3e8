"""Build SGLang's serving-benchmark command lines for the installed release.

The benchmark moved: ``sglang/bench_serving.py`` (``python -m
sglang.bench_serving``) up to about 0.5.13, ``sglang/benchmark/serving.py``
(``python -m sglang.benchmark.serving``) later, with the old module left as a
deprecated shim. The module and the flags it accepts are read from the
installed source with :mod:`ast`; SGLang (and torch) are never imported.

Standard library only, so it runs as Ansible module_utils on the target.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

# Newest first: the first file present decides the module.
BENCHMARK_MODULES = (
    ("benchmark/serving.py", "sglang.benchmark.serving"),
    ("bench_serving.py", "sglang.bench_serving"),
)
DATASET = "random-ids"  # token ids drawn at random: no dataset download
USED_FLAGS = (
    "--backend", "--host", "--port", "--model", "--served-model-name", "--dataset-name",
    "--random-input-len", "--random-output-len", "--random-range-ratio", "--num-prompts",
    "--max-concurrency", "--output-file", "--disable-tqdm",
)


class BenchError(Exception):
    """The installed SGLang cannot run the benchmark as asked; the message says why."""


@dataclass
class Benchmark:
    """The installed benchmark: its module, source file and flags (flag -> choices or None)."""

    module: str
    source: str
    flags: dict[str, Optional[list[str]]]


@dataclass
class LevelCommand:
    """One concurrency level: the argv to run and the file it appends to."""

    concurrency: int
    num_prompts: int
    argv: list[str]

    def as_dict(self) -> dict:
        return asdict(self)


def find_benchmark(package_dir: Path) -> tuple[str, Path]:
    """The benchmark's module name and source file in this package."""
    for relative, module in BENCHMARK_MODULES:
        source = package_dir / relative
        if source.is_file():
            return module, source
    searched = ", ".join(str(package_dir / relative) for relative, _ in BENCHMARK_MODULES)
    raise BenchError(f"no serving benchmark in {package_dir} (searched {searched}). "
                     "Is this an SGLang package directory? Install SGLang with the sglang role.")


def _literal_strings(node: ast.AST) -> Optional[list[str]]:
    if isinstance(node, (ast.List, ast.Tuple)) and all(
        isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.elts
    ):
        return [item.value for item in node.elts]
    return None


def read_flags(source: Path) -> dict[str, Optional[list[str]]]:
    """Every ``add_argument("--flag", ...)`` in the source: flag -> literal choices, or None."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise BenchError(f"{source} is not readable Python ({exc}); reinstall SGLang.") from None
    flags: dict[str, Optional[list[str]]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [arg.value for arg in node.args
                 if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--")]
        choices = next((_literal_strings(kw.value) for kw in node.keywords if kw.arg == "choices"), None)
        for name in names:
            flags[name] = choices
    return flags


def inspect_benchmark(package_dir: Path) -> Benchmark:
    """The installed benchmark, checked for every flag and the dataset this role uses."""
    module, source = find_benchmark(package_dir)
    flags = read_flags(source)
    missing = [flag for flag in USED_FLAGS if flag not in flags]
    if missing:
        raise BenchError(f"{source} ({module}) does not accept {', '.join(missing)}; "
                         "this role needs them. Use an SGLang release whose benchmark has them (0.5.8 or later).")
    datasets = flags["--dataset-name"]
    if datasets is not None and DATASET not in datasets:
        raise BenchError(f"{source} ({module}): --dataset-name has no {DATASET!r} choice "
                         f"(choices: {', '.join(datasets)}).")
    return Benchmark(module=module, source=str(source), flags=flags)


def prompts_for(concurrency: int, multiplier: int, minimum: int) -> int:
    """--num-prompts for a level: multiplier x concurrency, at least 2x and at least minimum."""
    if concurrency < 1:
        raise BenchError(f"concurrency {concurrency}: expected a positive integer")
    return max(concurrency * max(multiplier, 2), minimum)


def level_commands(
    benchmark: Benchmark,
    python: str,
    host: str,
    port: int,
    model: str,
    served_model_name: str,
    concurrencies: list[int],
    input_len: int,
    output_len: int,
    output_file: str,
    prompts_multiplier: int = 2,
    prompts_minimum: int = 0,
) -> list[LevelCommand]:
    """One command per concurrency, in the order given, all appending to output_file."""
    if not concurrencies:
        raise BenchError("no concurrencies given; expected a list of positive integers such as [64, 256]")
    if len(set(concurrencies)) != len(concurrencies):
        raise BenchError(f"concurrencies {concurrencies} repeat a level; each level runs once")
    for name, value in (("input length", input_len), ("output length", output_len)):
        if value < 1:
            raise BenchError(f"{name} {value}: expected a positive number of tokens")
    commands = []
    for concurrency in concurrencies:
        prompts = prompts_for(concurrency, prompts_multiplier, prompts_minimum)
        argv = [
            python, "-m", benchmark.module,
            "--backend", "sglang",
            "--host", host,
            "--port", str(port),
            # The model path gives the tokenizer; the served name is what the server answers to.
            "--model", model,
            "--served-model-name", served_model_name,
            "--dataset-name", DATASET,
            "--random-input-len", str(input_len),
            "--random-output-len", str(output_len),
            "--random-range-ratio", "1.0",
            "--num-prompts", str(prompts),
            "--max-concurrency", str(concurrency),
            "--output-file", output_file,
            "--disable-tqdm",
        ]
        commands.append(LevelCommand(concurrency=concurrency, num_prompts=prompts, argv=argv))
    return commands
