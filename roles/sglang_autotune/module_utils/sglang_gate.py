"""Find and classify SGLang's FlashInfer autotune gate, read-only.

SGLang decides whether to run FlashInfer's autotune in a gate function,
``_should_run_flashinfer_autotune`` (or ``should_run_flashinfer_autotune``),
that lists the MoE runner backends to tune. Up to 0.5.12 that list carries
``"flashinfer_cutlass",`` only as a comment, so the cutlass backend used on
SM120 is never tuned. This file finds the gate in an installed SGLang tree and
says whether that entry is commented, enabled or absent, refusing every form
it does not edit. ``sglang_gate_plan`` decides and proves from what it finds;
``sglang_gate_record`` reads pip's RECORD. Nothing here writes a file: the
edit is ``ansible.builtin.lineinfile``'s.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import stat
import subprocess
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from ansible.module_utils.sglang_gate_validate import ENTRY_RE, entry_state
from ansible.module_utils.sglang_locate import sglang_version

BACKEND = "flashinfer_cutlass"

# Relative to the sglang package directory; the gate moved between releases.
GATE_FILES = (
    "srt/model_executor/model_runner.py",
    "srt/model_executor/runner/base_runner.py",
    "srt/model_executor/runner/flashinfer_autotune.py",
)
GATE_FUNCTIONS = ("should_run_flashinfer_autotune", "_should_run_flashinfer_autotune")

# Any quoted mention of the backend: an entry in a form ENTRY_RE refuses
# (single quotes, `##`, a trailing comment) is quoted back to the operator.
MENTION_RE = re.compile(r"""["']flashinfer_cutlass["']""")

# The regexps handed to lineinfile (with backrefs, so a line that does not match
# is never added). Each must match exactly one line of the file, and that line
# must sit inside the gate: lineinfile edits the last match, so a second match
# anywhere would be edited instead.
ENABLE_REGEXP = r'^([ \t]*)#[ \t]*("flashinfer_cutlass",)[ \t]*$'
DISABLE_REGEXP = r'^([ \t]*)("flashinfer_cutlass",)[ \t]*$'
# The comment forms SGLang has shipped the entry in, tried against RECORD in this order.
COMMENTS = ("# ", "#")


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
    mentions: list[list[Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def shown(text: str) -> str:
    """A line quoted for a message: control characters (TAB, NUL, ESC, ...) escaped, edge spaces dropped."""
    return repr(text.strip(" "))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(path.read_bytes())


def file_kind(path: Path) -> str:
    """'missing', 'file', or what else is there (a FIFO would hang a read forever)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "path through something that is not a directory"
    except OSError as exc:
        return f"path that cannot be read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return "file"
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def python_problem(python: str) -> Optional[str]:
    """None when `python` runs as a Python 3 interpreter, else what went wrong."""
    probe = "import sys; print('python', sys.version_info[0])"
    try:
        proc = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        found = f"running it failed: {exc}"
    else:
        if proc.returncode == 0 and proc.stdout.strip() == "python 3":
            return None
        output = (proc.stdout + proc.stderr).strip()[:200]
        found = f"`{python} -c ...` exited {proc.returncode} with output {output!r}"
    return (
        f"sglang_autotune_python={python} is not a Python 3 interpreter ({found}). Set "
        "sglang_autotune_python to the SGLang virtualenv's bin/python (default "
        "/opt/sglang/current/bin/python), or give the package directory (-e sglang_package_dir=DIR)."
    )


def _check_package_dir(package_dir: Path) -> None:
    if not package_dir.is_dir():
        raise GateError(
            f"{package_dir} is not a directory. Expected the sglang package directory "
            f"(e.g. <venv>/lib/python3.X/site-packages/sglang). {FIX_HINT}"
        )
    if not (package_dir / "srt").is_dir() or not (package_dir / "__init__.py").is_file():
        try:
            found = str(sorted(p.name for p in package_dir.iterdir())[:10])
        except OSError as exc:
            found = f"nothing readable ({exc.strerror})"
        raise GateError(
            f"{package_dir} is not an SGLang package: expected __init__.py and srt/ in it, "
            f"found {found}. {FIX_HINT}"
        )


def decode_source(path: Path, data: bytes) -> str:
    """The file's text; a UTF-8 BOM is allowed (Python accepts it) and left out."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GateError(f"cannot read {path} as UTF-8 text: {exc}. {FIX_HINT}") from exc


def _parse(path: Path) -> tuple[str, ast.Module]:
    kind = file_kind(path)
    if kind != "file":
        raise GateError(
            f"{path} is a {kind}, expected a regular Python file; refusing to read or edit "
            f"it. {FIX_HINT}"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GateError(f"cannot read {path}: {exc}. {FIX_HINT}") from exc
    source = decode_source(path, data)
    if "\x00" in source:
        lineno = source.count("\n", 0, source.index("\x00")) + 1
        raise GateError(
            f"{path} holds a NUL byte (\\x00) on line {lineno}: it is not the Python source "
            f"SGLang ships; refusing to read or edit it. {FIX_HINT}"
        )
    try:
        return source, ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise GateError(
            f"{path} is not valid Python (line {exc.lineno}: {exc.msg}); "
            f"refusing to edit it. {FIX_HINT}"
        ) from exc


def source_lines(source: str) -> list[str]:
    """Lines as lineinfile sees them: split on LF only (a form feed is not a line end)."""
    lines = source.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


# What can hold a def: a def is a statement, and expressions hold none (a lambda's body is one).
_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def _gate_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    """The gate defs at any depth, in ast.walk's order, visiting statements only: a tenth of the
    nodes of a model_runner.py (11 to 1.6 ms on 0.5.12's; the gate and proof modules each read it once)."""
    found = []
    pending: deque[ast.AST] = deque([tree])
    while pending:
        node = pending.popleft()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in GATE_FUNCTIONS:
            found.append(node)
        pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, _HOLDS_STATEMENTS))
    return found


def backend_listed(function: ast.AST) -> bool:
    """True when "flashinfer_cutlass" is an item of a list, tuple or set in the function."""
    for node in ast.walk(function):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for item in node.elts:
                if isinstance(item, ast.Constant) and item.value == BACKEND:
                    return True
    return False


def refuse_links(package_dir: Path, rel: str) -> None:
    """Refuse a symbolic link on the way from package_dir to package_dir/rel, dangling or not.

    pip never installs a link from a wheel, so a link means someone replaced the
    file; lineinfile would edit the link's target, which may be another install's.
    """
    path = package_dir
    for part in Path(rel).parts:
        path = path / part
        if path.is_symlink():
            target = os.path.realpath(path)
            raise GateError(
                f"{path} is a symbolic link (to {os.readlink(path)}, that is {target}): pip never "
                "installs one, so this is not the file SGLang shipped, and an edit would change "
                f"{target}, which other installs may share. Refusing to read or edit it; nothing "
                "was changed. Reinstall SGLang, or replace the link by a copy of the file "
                f"(cp --remove-destination {target} {path}) if you made it on purpose."
            )
        if not os.path.lexists(path):
            return


def find_gate(package_dir: Path) -> tuple[Path, str, ast.FunctionDef, list[str]]:
    """Return (file, source, function node, files searched); exactly one gate or GateError."""
    _check_package_dir(package_dir)
    searched = [str(package_dir / rel) for rel in GATE_FILES]
    found: list[tuple[Path, str, ast.FunctionDef]] = []
    for rel in GATE_FILES:
        path = package_dir / rel
        refuse_links(package_dir, rel)
        if file_kind(path) == "missing":
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


def _refuse_cr(path: Path, source: str, version: str) -> None:
    if "\r" not in source:
        return
    lines = source.split("\n")
    with_cr = [n for n, text in enumerate(lines, start=1) if "\r" in text]
    whole = len(with_cr) >= len(source_lines(source)) - 1
    raise GateError(
        f"SGLang {version}, {path}: CRLF (\\r\\n) line endings "
        f"{'throughout the file' if whole else 'on line(s) ' + ', '.join(map(str, with_cr[:5]))}. "
        "SGLang ships LF, and lineinfile would write the edited line with LF, mixing line "
        "endings; refusing before any change. Reinstall SGLang to get the shipped file back "
        "(or convert it to LF endings, e.g. with dos2unix, if you changed it on purpose)."
    )


def inspect_gate(package_dir: str | Path) -> GateReport:
    """Locate the gate and classify its "flashinfer_cutlass" entry.

    Raises GateError when the entry appears more than once in the gate, or only
    outside it, or in a form this role does not edit: each means the file is
    not what this patch was written for.
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
    _refuse_cr(path, source, report.version)
    inside: list[tuple[int, str, str]] = []
    for lineno, text in enumerate(source_lines(source), start=1):
        state = entry_state(text)
        if not state:
            if start <= lineno <= end and MENTION_RE.search(text):
                report.mentions.append([lineno, text])
            continue
        if start <= lineno <= end:
            inside.append((lineno, text, state))
        else:
            report.outside_gate.append(lineno)

    context = (
        f"SGLang {report.version}, {path}, gate {node.name}() at lines {start}-{end}"
    )
    if len(inside) > 1:
        lines = ", ".join(f"{n}: {shown(t)}" for n, t, _ in inside)
        raise GateError(
            f'{context}: expected one "{BACKEND}", entry in the gate, found {len(inside)} '
            f"(lines {lines}). Refusing to guess which one to edit. {FIX_HINT}"
        )
    if not inside:
        if report.mentions:
            found = "; ".join(f"line {n} reads {shown(t)}" for n, t in report.mentions)
            raise GateError(
                f'{context}: {found}. That is not a form this role edits: it expects the line '
                f'to be exactly "{BACKEND}", or # "{BACKEND}", (any indentation, nothing '
                f"after the comma). Nothing was changed. Put the line back as shipped, or "
                f"reinstall SGLang."
            )
        if report.outside_gate:
            raise GateError(
                f'{context}: no "{BACKEND}", entry inside the gate, but one outside it at '
                f"line(s) {', '.join(map(str, report.outside_gate))}. The anchor moved; "
                f"only the gate's own list may be edited. {FIX_HINT}"
            )
        return report  # state stays "absent"

    report.lineno, report.line, report.state = inside[0]
    if report.ast_listed == (report.state == "commented"):
        raise GateError(
            f"{context}: line {report.lineno} reads {shown(report.line)} but the parsed "
            f"gate {'does' if report.ast_listed else 'does not'} list \"{BACKEND}\". {FIX_HINT}"
        )
    return report


def regexp_matches(source: str, regexp: str) -> list[int]:
    pattern = re.compile(regexp)
    return [n for n, text in enumerate(source_lines(source), start=1) if pattern.search(text)]


def other_forms(line: str) -> list[str]:
    """The entry line with its comment toggled, in each form SGLang may have shipped it.

    An enabled line may have been shipped as either comment form; a commented
    one as the bare entry. Trailing whitespace is not kept: SGLang ships none.
    """
    match = ENTRY_RE.match(line)
    if not match:
        return []
    entry = f'{match.group("indent")}"{BACKEND}",'
    if match.group("comment") is not None:
        return [entry]
    return [f'{match.group("indent")}{comment}"{BACKEND}",' for comment in COMMENTS]
