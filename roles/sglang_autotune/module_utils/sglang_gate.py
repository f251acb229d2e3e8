"""Find, inspect and verify SGLang's FlashInfer autotune gate, read-only.

SGLang decides whether to run FlashInfer's autotune in a gate function,
``_should_run_flashinfer_autotune`` (or ``should_run_flashinfer_autotune``),
that lists the MoE runner backends to tune. Up to 0.5.12 that list carries
``"flashinfer_cutlass",`` only as a comment, so the cutlass backend used on
SM120 is never tuned. This module finds the gate in an installed SGLang tree,
says whether that entry is commented, enabled or absent, plans the one-line
edit that ``ansible.builtin.lineinfile`` makes, and proves the result.

Nothing here writes a file: the edit is lineinfile's, so that ``--check
--diff`` and Ansible's change reporting work as users expect.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

try:
    from ansible.module_utils.sglang_locate import sglang_version
except ImportError:  # pytest imports this file outside Ansible
    from sglang_locate import sglang_version

BACKEND = "flashinfer_cutlass"

# Relative to the sglang package directory; the gate moved between releases.
GATE_FILES = (
    "srt/model_executor/model_runner.py",
    "srt/model_executor/runner/base_runner.py",
    "srt/model_executor/runner/flashinfer_autotune.py",
)
GATE_FUNCTIONS = ("should_run_flashinfer_autotune", "_should_run_flashinfer_autotune")

# Only a line that is exactly the list item counts, commented or not: the TODO
# comment above it names the backend too and must never match.
ENTRY_RE = re.compile(r'^(?P<indent>[ \t]*)(?P<comment>#[ \t]*)?"flashinfer_cutlass",[ \t]*\r?$')

# The regexps handed to lineinfile. Each must match exactly one line of the
# file, and that line must sit inside the gate: lineinfile edits the last
# match, so a second match anywhere would be edited instead.
ENABLE_REGEXP = r'^([ \t]*)#[ \t]*("flashinfer_cutlass",)[ \t]*$'
ENABLE_LINE = r"\1\2"
DISABLE_REGEXP = r'^([ \t]*)("flashinfer_cutlass",)[ \t]*$'
DISABLE_LINE_DEFAULT = r"\1# \2"

STATES = ("commented", "enabled", "absent")
ACTIONS = ("enable", "disable", "none")

FIX_HINT = (
    "Reinstall SGLang so the file is as shipped, or point sglang_autotune_package_dir "
    "at the sglang package directory (the folder holding srt/)."
)


class GateError(Exception):
    """The gate cannot be patched safely; the message says why and how to fix it."""


@dataclass
class GateReport:
    """What was found, in the shape the Ansible module returns."""

    package_dir: str
    version: str
    searched: list[str]
    file: str = ""
    gate_function: str = ""
    gate_lines: list[int] = field(default_factory=list)
    state: str = "absent"
    lineno: int = 0
    line: str = ""
    sha256: str = ""
    ast_listed: bool = False
    outside_gate: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_package_dir(package_dir: Path) -> None:
    if not package_dir.is_dir():
        raise GateError(
            f"{package_dir} is not a directory. Expected the sglang package directory "
            f"(e.g. <venv>/lib/python3.X/site-packages/sglang). {FIX_HINT}"
        )
    if not (package_dir / "srt").is_dir() or not (package_dir / "__init__.py").is_file():
        raise GateError(
            f"{package_dir} is not an SGLang package: expected __init__.py and srt/ in it, "
            f"found {sorted(p.name for p in package_dir.iterdir())[:10]}. {FIX_HINT}"
        )


def _parse(path: Path) -> tuple[str, ast.Module]:
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GateError(f"cannot read {path} as UTF-8 text: {exc}. {FIX_HINT}") from exc
    try:
        return source, ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise GateError(
            f"{path} is not valid Python (line {exc.lineno}: {exc.msg}); "
            f"refusing to edit it. {FIX_HINT}"
        ) from exc


def _gate_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in GATE_FUNCTIONS
    ]


def backend_listed(function: ast.AST) -> bool:
    """True when "flashinfer_cutlass" is an item of a list, tuple or set in the function."""
    for node in ast.walk(function):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for item in node.elts:
                if isinstance(item, ast.Constant) and item.value == BACKEND:
                    return True
    return False


def find_gate(package_dir: Path) -> tuple[Path, str, ast.FunctionDef, list[str]]:
    """Return (file, source, function node, files searched); exactly one gate or GateError."""
    _check_package_dir(package_dir)
    searched = [str(package_dir / rel) for rel in GATE_FILES]
    found: list[tuple[Path, str, ast.FunctionDef]] = []
    for rel in GATE_FILES:
        path = package_dir / rel
        if not path.exists():
            continue
        source, tree = _parse(path)
        found.extend((path, source, node) for node in _gate_functions(tree))
    if len(found) != 1:
        where = ", ".join(f"{p}:{n.lineno}" for p, _, n in found) or "none"
        raise GateError(
            f"expected exactly one 'def _?should_run_flashinfer_autotune' in SGLang "
            f"{sglang_version(package_dir)}, found {len(found)} ({where}). Searched: "
            f"{', '.join(searched)}. This SGLang layout is not supported; {FIX_HINT}"
        )
    path, source, node = found[0]
    return path, source, node, searched


def inspect_gate(package_dir: str | Path) -> GateReport:
    """Locate the gate and classify its "flashinfer_cutlass" entry.

    Raises GateError when the entry appears more than once in the gate, or only
    outside it: both mean the file is not what this patch was written for.
    """
    # Resolved, so that a record follows the real file and not a `current` link
    # that may later point at another virtualenv.
    package_dir = Path(package_dir).resolve()
    path, source, node, searched = find_gate(package_dir)
    start, end = node.lineno, node.end_lineno or node.lineno
    report = GateReport(
        package_dir=str(package_dir),
        version=sglang_version(package_dir),
        searched=searched,
        file=str(path),
        gate_function=node.name,
        gate_lines=[start, end],
        sha256=sha256_file(path),
        ast_listed=backend_listed(node),
    )
    inside: list[tuple[int, str, bool]] = []
    for lineno, text in enumerate(source.splitlines(), start=1):
        match = ENTRY_RE.match(text)
        if not match:
            continue
        if start <= lineno <= end:
            inside.append((lineno, text, match.group("comment") is not None))
        else:
            report.outside_gate.append(lineno)

    context = (
        f"SGLang {report.version}, {path}, gate {node.name}() at lines {start}-{end}"
    )
    if len(inside) > 1:
        lines = ", ".join(f"{n}: {t.strip()}" for n, t, _ in inside)
        raise GateError(
            f'{context}: expected one "{BACKEND}", entry in the gate, found {len(inside)} '
            f"(lines {lines}). Refusing to guess which one to edit. {FIX_HINT}"
        )
    if not inside:
        if report.outside_gate:
            raise GateError(
                f'{context}: no "{BACKEND}", entry inside the gate, but one outside it at '
                f"line(s) {', '.join(map(str, report.outside_gate))}. The anchor moved; "
                f"only the gate's own list may be edited. {FIX_HINT}"
            )
        return report  # state stays "absent"

    report.lineno, report.line, commented = inside[0]
    report.state = "commented" if commented else "enabled"
    if report.ast_listed == commented:
        raise GateError(
            f"{context}: line {report.lineno} reads {report.line.strip()!r} but the parsed "
            f"gate {'does' if report.ast_listed else 'does not'} list \"{BACKEND}\". {FIX_HINT}"
        )
    return report


def regexp_matches(source: str, regexp: str) -> list[int]:
    pattern = re.compile(regexp)
    return [n for n, text in enumerate(source.splitlines(), start=1) if pattern.search(text)]


def state_file_for(state_dir: str | Path, gate_file: str | Path) -> Path:
    """Where the record of this project's edit to gate_file lives."""
    name = str(gate_file).strip("/").replace("/", "__")
    return Path(state_dir) / f"{name}.json"


def read_record(path: Optional[Path]) -> Optional[dict[str, Any]]:
    if path is None or not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GateError(
            f"state file {path} is not readable JSON ({exc}); remove it and re-run"
        ) from exc
    return record if isinstance(record, dict) else None


@dataclass
class Plan:
    """What the role should do, and why, in words an operator reads in the output."""

    action: str
    message: str
    enabled_by_project: bool = False
    upstream_enabled: bool = False
    record_stale: bool = False
    regexp: str = ""
    line: str = ""
    server_args: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unique_edit(report: GateReport, regexp: str) -> None:
    source = Path(report.file).read_text(encoding="utf-8")
    hits = regexp_matches(source, regexp)
    if hits != [report.lineno]:
        raise GateError(
            f"SGLang {report.version}, {report.file}: the edit regexp {regexp!r} must match "
            f"only line {report.lineno} (in the gate), it matches line(s) "
            f"{', '.join(map(str, hits)) or 'none'}. lineinfile would edit the wrong line; "
            f"nothing was changed. {FIX_HINT}"
        )


def plan_edit(report: GateReport, record: Optional[dict[str, Any]], autotune: bool) -> Plan:
    """Decide the one edit (or none) that makes the gate match `autotune`."""
    version = report.version
    if report.state == "absent":
        raise GateError(
            f'SGLang {version}: the gate {report.gate_function}() in {report.file} (lines '
            f'{report.gate_lines[0]}-{report.gate_lines[1]}) has no "{BACKEND}", entry, '
            f"commented or not. Searched: {', '.join(report.searched)}. This version cannot "
            f"autotune the {BACKEND} MoE backend (0.5.6 and older gate on attention backends "
            f"behind --enable-flashinfer-autotune); use SGLang 0.5.8 or later."
        )
    ours = bool(record) and record.get("file") == report.file
    if report.state == "commented":
        stale = ours
        if not autotune:
            return Plan("none", f"SGLang {version}: {BACKEND} is commented out as shipped; "
                        "autotune of that backend is off, nothing to change.", record_stale=stale)
        _unique_edit(report, ENABLE_REGEXP)
        return Plan("enable", f"SGLang {version}: uncommenting {BACKEND} at "
                    f"{report.file}:{report.lineno}.", record_stale=stale,
                    regexp=ENABLE_REGEXP, line=ENABLE_LINE)

    # enabled
    if ours and record.get("patched_sha256") == report.sha256:
        if autotune:
            return Plan("none", f"SGLang {version}: {BACKEND} already enabled by this project "
                        f"at {report.file}:{report.lineno}.", enabled_by_project=True)
        _unique_edit(report, DISABLE_REGEXP)
        original = str(record.get("original_line") or "")
        line = original.replace("\\", "\\\\") if ENTRY_RE.match(original) else DISABLE_LINE_DEFAULT
        return Plan("disable", f"SGLang {version}: restoring the original comment at "
                    f"{report.file}:{report.lineno}.", enabled_by_project=True,
                    regexp=DISABLE_REGEXP, line=line)
    if ours:
        if autotune:
            return Plan("none", f"SGLang {version}: {BACKEND} is enabled at "
                        f"{report.file}:{report.lineno}.", enabled_by_project=True)
        raise GateError(
            f"SGLang {version}: {report.file} changed since this project patched it "
            f"(sha256 {report.sha256}, recorded {record.get('patched_sha256')}), so rolling "
            f"back cannot restore the original bytes. Reinstall SGLang to get the shipped "
            f"file back."
        )
    # Upstream enables the entry from 0.5.13 on: commenting it out would disable
    # what upstream enables, so the server flag is the supported off switch.
    if autotune:
        return Plan("none", f"SGLang {version}: {BACKEND} autotune is enabled upstream; "
                    "no patch needed.", upstream_enabled=True)
    return Plan("none", f"SGLang {version}: {BACKEND} autotune is enabled upstream; the file "
                "is left as shipped and the server gets --disable-flashinfer-autotune.",
                upstream_enabled=True, server_args={"disable-flashinfer-autotune": True})


def verify_gate(report: GateReport, expect: str, expect_sha256: str = "") -> list[str]:
    """Prove the gate is in the expected state; return the problems (empty means proven)."""
    problems: list[str] = []
    source = Path(report.file).read_text(encoding="utf-8")
    try:
        compile(source, report.file, "exec")
    except SyntaxError as exc:
        problems.append(f"{report.file} no longer compiles (line {exc.lineno}: {exc.msg})")
    want_listed = expect == "enabled"
    if report.state != expect:
        problems.append(f'expected the "{BACKEND}", entry {expect}, found it {report.state}')
    if report.ast_listed != want_listed:
        problems.append(
            f'the parsed gate {report.gate_function}() {"lists" if report.ast_listed else "does not list"} '
            f'"{BACKEND}"; expected it {"listed" if want_listed else "not listed"}'
        )
    if expect_sha256 and report.sha256 != expect_sha256:
        problems.append(f"sha256 of {report.file} is {report.sha256}, expected {expect_sha256}")
    return problems
