"""Decide the one edit of SGLang's autotune gate, and prove it from the file read back.

One engine, run on two readings of the file: before the edit on the file as
found (``decide``), after it on the file read back (``prove``). Both compare the
file with its reference, what it was before any edit of this role's:

- pip's RECORD (``sglang_gate_record``), whenever a RECORD lists the file;
- without one (an editable or source install), this role's log of the original
  bytes and entry line, written before the first edit because nothing else
  remembers them after it;
- without either, the file as found.

A file is the reference's bytes (as shipped), or those bytes with only the
entry line toggled (patched, by this role, by hand, or by a run killed after
its edit), or it is refused. Nothing here predicts what lineinfile writes: the
proof reads the result back and puts the one line back as shipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ansible.module_utils.sglang_gate import (
    BACKEND,
    DISABLE_REGEXP,
    ENABLE_REGEXP,
    FIX_HINT,
    GateError,
    GateReport,
    decode_source,
    other_forms,
    regexp_matches,
    sha256_bytes,
    shown,
)
from ansible.module_utils.sglang_gate_validate import command, entry_state, expected, with_line

NO_RECORD = (" (No RECORD lists this file, an editable or source install: this role's log of the "
             "original decides, and a rollback cannot be checked against what was shipped.)")


# Where Ansible's argument spec (check_type_bool) and its `bool` filter read a
# value alike. Anything else ('y', 't', 'n', 'f', ' true', 1.0, '') one of them
# reads differently or refuses, so it is refused here, before any change.
AUTOTUNE_TRUE = ("true", "yes", "on", "1")
AUTOTUNE_FALSE = ("false", "no", "off", "0")


def autotune_choice(value: Any, name: str = "sglang_autotune_enabled") -> bool:
    """The one place a spelling of `autotune` becomes True or False; ValueError names what was found."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    if isinstance(value, str) and value.lower() in AUTOTUNE_TRUE + AUTOTUNE_FALSE:
        return value.lower() in AUTOTUNE_TRUE
    raise ValueError(
        f"{name} (from -e autotune=... unless set itself) is {value!r} ({type(value).__name__}). "
        f"Accepted: true or false as a YAML/JSON boolean, 0 or 1, or one of "
        f"{', '.join(AUTOTUNE_TRUE + AUTOTUNE_FALSE)} in any case, with nothing around it. "
        "Ansible's argument spec and its bool filter read other spellings differently, so it is "
        "refused before any change. Use e.g. -e autotune=true or -e autotune=false."
    )


@dataclass
class Reference:
    """What the gate file was before any edit of this role's, and who says so."""

    kind: str  # "RECORD", "log" (no RECORD: this role's log) or "file" (neither: the file as found)
    sha256: str
    source: str = ""  # the RECORD or the log
    line: str = ""  # kind "log": the entry line as it was
    unusable: str = ""  # kind "file": why a log at this role's name for the file cannot be used


@dataclass
class Shipped:
    """How the file was before any edit, proven from its bytes against the reference."""

    reference: Reference
    state: str  # the entry as shipped: "commented" or "enabled"
    line: str  # the entry line as shipped


def reference(report: GateReport, record: Optional[tuple[str, str]], log: Optional[dict[str, Any]],
              log_why: str, state_file: Path) -> Reference:
    """RECORD's (path, sha256) when there is one; else this role's log when it names the original; else the file."""
    if record is not None:
        return Reference("RECORD", record[1], record[0])
    if log is not None and log.get("file") != report.file:
        return Reference("file", report.sha256)  # another file's log is not this file's
    if log is not None:
        sha, line = log.get("original_sha256"), log.get("original_line")
        if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) and isinstance(line, str) \
                and entry_state(line) == "commented":
            return Reference("log", sha, str(state_file), line)
        log_why = f"{state_file} does not name the original sha256 and commented entry line"
    return Reference("file", report.sha256, str(state_file) if log_why else "", unusable=log_why)


def _release(version: str) -> tuple[int, ...]:
    numbers = re.match(r"^(\d+(?:\.\d+)*)", version)
    return tuple(int(n) for n in numbers.group(1).split(".")) if numbers else ()


def _reinstall(version: str) -> str:
    pin = f"=={version}" if _release(version) else ""
    return (f"Reinstall SGLang to get the shipped file back (e.g. pip install --force-reinstall "
            f"--no-deps sglang{pin} with the virtualenv's pip).")


def _mismatch(report: GateReport, ref: Reference, data: bytes, forms: list[str]) -> str:
    version = report.version
    toggled = sha256_bytes(with_line(data, report.lineno, forms[0])) if forms else ""
    if ref.kind == "RECORD":
        return (f"SGLang {version}: {report.file} is neither as shipped nor as shipped plus the "
                f"one-line edit of its \"{BACKEND}\", entry: its sha256 is {report.sha256}, "
                f"{ref.source} names {ref.sha256}, and with line {report.lineno} "
                f"{'uncommented' if report.state == 'commented' else 're-commented'} it would be "
                f"{toggled}. So the file changed since it was installed, by more than the comment of "
                f"that entry: on another line, or on the entry line itself (now {shown(report.line)}; "
                f"a TAB or other whitespace where SGLang has spaces counts). RECORD holds only hashes, "
                f"so where cannot be located. Nothing was changed. {_reinstall(version)}")
    if ref.kind == "log":
        return (f"SGLang {version}: {report.file} changed since this project patched it: its sha256 "
                f"is {report.sha256}, and with line {report.lineno} put back as {shown(ref.line)} it "
                f"would be {toggled}, not the {ref.sha256} that {ref.source} names. So a rollback "
                f"cannot restore the original bytes. Nothing was changed. {_reinstall(version)}"
                + NO_RECORD)
    return (f"SGLang {version}: {report.file} has the entry enabled, and this role's log of it cannot "
            f"be used ({ref.unusable}): the file may carry this project's patch, changed since this "
            f"project patched it, and without RECORD nothing else names the original bytes. Nothing "
            f"was changed. {_reinstall(version)} If SGLang ships the entry enabled, remove "
            f"{ref.source}." + NO_RECORD)


def shipped(report: GateReport, ref: Reference, data: bytes) -> Shipped:
    """The entry as shipped, from the file's bytes (`data`); GateError when they are not the
    reference's bytes, with or without the entry line toggled."""
    if ref.kind == "file" and ref.unusable and report.state == "enabled":
        raise GateError(_mismatch(report, ref, data, []))
    if report.sha256 == ref.sha256:
        return Shipped(ref, report.state, report.line)
    if ref.kind == "RECORD":
        forms = other_forms(report.line)
    else:  # this role logs only what it uncommented
        forms = [ref.line] if report.state == "enabled" else []
    for form in forms:
        if sha256_bytes(with_line(data, report.lineno, form)) == ref.sha256:
            return Shipped(ref, "enabled" if report.state == "commented" else "commented", form)
    if ref.kind == "log" and report.state == "commented":
        # Reinstalled or changed since the log was written, without this role's edit: a stale log.
        stale = Reference("file", report.sha256, ref.source,
                          unusable=f"{ref.source} describes other bytes (SGLang reinstalled or the file changed since)")
        return Shipped(stale, report.state, report.line)
    raise GateError(_mismatch(report, ref, data, forms))


def target_state(shipped_state: str, enabled: bool) -> str:
    """The entry's state after this run: enabled when autotune is wanted or SGLang ships it so."""
    return "enabled" if enabled or shipped_state == "enabled" else "commented"


def validate_command(python: str, lineno: int, decision: Decision, enabled: bool) -> str:
    """lineinfile's `validate:` for this edit: what the temporary file must be, checked by `python`
    (sglang_gate_validate)."""
    found = decision.shipped
    target = target_state(found.state, enabled)
    return command(python, expected(
        lineno, found.line, found.reference.sha256, target, target != found.state))


def _absent_message(report: GateReport, ref: Reference) -> str:
    version = report.version
    where = (f'SGLang {version}: the gate {report.gate_function}() in {report.file} (lines '
             f'{report.gate_lines[0]}-{report.gate_lines[1]}) has no "{BACKEND}", entry, '
             f"commented or not. Searched: {', '.join(report.searched)}.")
    if ref.kind == "RECORD" and ref.sha256 != report.sha256:
        return (f"{where} The file also differs from what {ref.source} names for it "
                f"(sha256 {report.sha256}, shipped {ref.sha256}): the entry was removed or "
                f"the file edited since SGLang was installed. Nothing was changed. "
                f"{_reinstall(version)}")
    if _release(version) and _release(version) < (0, 5, 7):
        return (f"{where} This version cannot autotune the {BACKEND} MoE backend (0.5.6 and "
                f"older gate on attention backends behind --enable-flashinfer-autotune); use "
                f"SGLang 0.5.7 or later.")
    origin = "the file is as shipped (RECORD agrees)" if ref.kind == "RECORD" else "there is no RECORD to compare with"
    return (f"{where} The entry is gone from this version's gate; {origin}. This role has no "
            f"line to edit here: check how SGLang {version} decides on {BACKEND} autotune, and "
            f"use --disable-flashinfer-autotune to turn autotune off.")


@dataclass
class Decision:
    """The one edit (or none) that makes the gate match `autotune`, in words for the operator."""

    action: str  # "enable", "disable" or "none"
    message: str
    shipped: Shipped
    upstream_enabled: bool
    server_args: dict[str, Any] = field(default_factory=dict)
    regexp: str = ""
    line: str = ""  # lineinfile's line (backrefs: true); the entry lines hold no backslash


def _unique_edit(report: GateReport, regexp: str) -> None:
    source = decode_source(Path(report.file), Path(report.file).read_bytes())
    hits = regexp_matches(source, regexp)
    if hits != [report.lineno]:
        raise GateError(
            f"SGLang {report.version}, {report.file}: the edit regexp {regexp!r} must match "
            f"only line {report.lineno} (in the gate), it matches line(s) "
            f"{', '.join(map(str, hits)) or 'none'}. lineinfile would edit the wrong line; "
            f"nothing was changed. {FIX_HINT}"
        )


def _settled(report: GateReport, found: Shipped, enabled: bool) -> str:
    version, kind = report.version, found.reference.kind
    if report.state != found.state:
        basis = "RECORD's bytes" if kind == "RECORD" else "the original bytes in this role's log"
        return (f"SGLang {version}: {BACKEND} is already enabled at {report.file}:{report.lineno}; "
                f"the file is {basis} plus that one-line edit. Nothing to change.")
    if found.state == "commented":
        agree = {"RECORD": "RECORD agrees", "log": "this role's log agrees"}.get(kind, "no RECORD to compare with")
        return (f"SGLang {version}: {BACKEND} is commented out as shipped ({agree}); autotune of that "
                "backend is off, nothing to change.")
    if enabled:
        return f"SGLang {version}: {BACKEND} autotune is enabled upstream (the file is as shipped); no patch needed."
    return (f"SGLang {version}: {BACKEND} autotune is enabled upstream; the file is left as shipped "
            "and the server gets --disable-flashinfer-autotune.")


def decide(report: GateReport, ref: Reference, enabled: bool, data: bytes) -> Decision:
    """The edit that makes the gate match `enabled`, from the file's bytes and its reference."""
    if report.state == "absent":
        raise GateError(_absent_message(report, ref))
    found = shipped(report, ref, data)
    upstream = found.state == "enabled"
    target = target_state(found.state, enabled)
    note = "" if found.reference.kind == "RECORD" else NO_RECORD
    decision = Decision("none", "", found, upstream,
                        {} if enabled or not upstream else {"disable-flashinfer-autotune": True})
    if target == report.state:
        decision.message = _settled(report, found, enabled) + note
        return decision
    where = f"{report.file}:{report.lineno}"
    if target == "enabled":
        decision.action, decision.regexp, decision.line = "enable", ENABLE_REGEXP, other_forms(report.line)[0]
        decision.message = f"SGLang {report.version}: uncommenting {BACKEND} at {where}" + (
            ", as shipped upstream." if upstream else ".")
    else:
        ref = found.reference
        named = f"the bytes {ref.source} names" if ref.kind == "RECORD" else f"the original bytes {ref.source} names"
        decision.action, decision.regexp, decision.line = "disable", DISABLE_REGEXP, found.line
        decision.message = f"SGLang {report.version}: restoring the shipped comment at {where} ({named})."
    if upstream and not enabled:
        decision.message += " The server gets --disable-flashinfer-autotune."
    decision.message += note
    _unique_edit(report, decision.regexp)
    return decision


def log_fields(report: GateReport, found: Shipped, patched_sha256: str) -> dict[str, Any]:
    """The log of a patched file: what it was before the edit, and (once read back) after."""
    ref = found.reference
    return {"file": report.file, "version": report.version, "lineno": report.lineno,
            "decided_by": "RECORD" if ref.kind == "RECORD" else "log",
            "shipped_record": ref.source if ref.kind == "RECORD" else "",
            "original_line": found.line, "original_sha256": ref.sha256, "patched_sha256": patched_sha256}


def final_log(report: GateReport, found: Shipped) -> Optional[dict[str, Any]]:
    """The log of a file in its final state: a patched file's fields, or None (as shipped: no log)."""
    return log_fields(report, found, report.sha256) if report.state != found.state else None


def log_ahead(report: GateReport, decision: Decision) -> Optional[dict[str, Any]]:
    """Without RECORD or a log naming the original: the log to write before uncommenting.

    After the edit nothing else knows the original line and bytes, so a rollback
    (or the proof) could not restore or check them; written first, a kill
    between the log and the edit leaves a log that still describes the file.
    """
    if decision.action != "enable" or decision.shipped.reference.kind != "file":
        return None
    return log_fields(report, decision.shipped, "")


@dataclass
class Proof:
    """What the file read back after the edit is, and the log that goes with it."""

    outcome: str  # "patched" or "shipped"
    pending: bool  # check mode: the edit was not made, so nothing could be read back
    message: str
    log: Optional[dict[str, Any]]  # the log's fields when patched; None: no log
    decides: bool  # without RECORD the log is what a rollback reads


def prove(report: GateReport, ref: Reference, enabled: bool, data: bytes, check: bool) -> Proof:
    """Prove the file read back (`data`): AST, compile(), and its sha256 against the reference,
    as is (as shipped) or with the entry line put back as shipped (patched). GateError when not."""
    try:
        compile(decode_source(Path(report.file), data), report.file, "exec")
    except SyntaxError as exc:
        raise GateError(f"{report.file} no longer compiles (line {exc.lineno}: {exc.msg})") from exc
    if report.state == "absent":
        raise GateError(f'{report.file} has no "{BACKEND}", entry in its gate any more')
    try:
        found = shipped(report, ref, data)
    except GateError as exc:
        raise GateError(f"read back after the edit, the file is not its reference's bytes with at most "
                        f"the entry line changed, so something else changed it during this run. {exc}") from exc
    target = target_state(found.state, enabled)
    outcome = "shipped" if target == found.state else "patched"
    decides = found.reference.kind != "RECORD"
    log = log_fields(report, found, report.sha256) if outcome == "patched" else None  # final_log, once read back
    if report.state != target and check:
        return Proof(outcome, True, "Check mode: the edit is not made, so there is nothing to read back; "
                     "a real run proves it.", log, decides)
    if report.state != target or report.ast_listed != (target == "enabled"):
        raise GateError(f'the "{BACKEND}", entry is {report.state} and the parsed gate '
                        f'{"lists" if report.ast_listed else "does not list"} it, expected it {target}')
    if found.reference.kind == "file":
        raise GateError(f"no RECORD lists {report.file} and this role's log of the original "
                        f"({found.reference.source or 'none'}) is gone or unusable, so the edit cannot be "
                        "checked against the original bytes")
    ref = found.reference
    sha = (f"its sha256 {report.sha256} is what {ref.source} names" if outcome == "shipped" else
           f"with line {report.lineno} put back as {shown(found.line)} it hashes to {ref.sha256}, what "
           f"{ref.source} names")
    return Proof(outcome, False, f"SGLang {report.version}: proven {report.state} at {report.file}:"
                 f"{report.lineno}: the parsed gate {'lists' if report.ast_listed else 'does not list'} "
                 f"{BACKEND}, the file compiles, and {sha}.", log, decides)
