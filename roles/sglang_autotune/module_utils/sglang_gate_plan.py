"""Plan the one edit of SGLang's autotune gate, from pip's RECORD and the file.

``sglang_gate`` finds and classifies the gate; this file decides what a run
does with it. With RECORD listing the gate file, the file is as shipped
(RECORD's bytes), patched (RECORD's bytes with only the entry line toggled, by
whoever) or refused; this project's log is written, never read. Without RECORD
(an editable or source install) this project's record of its edits decides,
as it did before RECORD was used.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

try:
    from ansible.module_utils.sglang_gate import (
        BACKEND,
        DISABLE_LINE_DEFAULT,
        DISABLE_LINES,
        DISABLE_REGEXP,
        ENABLE_LINE,
        ENABLE_REGEXP,
        ENTRY_RE,
        FIX_HINT,
        GateError,
        GateReport,
        Shipped,
        apply_edit,
        decode_source,
        file_kind,
        regexp_matches,
        sha256_bytes,
        shown,
    )
except ImportError:  # pytest imports this file outside Ansible
    from sglang_gate import (
        BACKEND,
        DISABLE_LINE_DEFAULT,
        DISABLE_LINES,
        DISABLE_REGEXP,
        ENABLE_LINE,
        ENABLE_REGEXP,
        ENTRY_RE,
        FIX_HINT,
        GateError,
        GateReport,
        Shipped,
        apply_edit,
        decode_source,
        file_kind,
        regexp_matches,
        sha256_bytes,
        shown,
    )


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
class Plan:
    """What the role should do, and why, in words an operator reads in the output.

    outcome: "patched" (the file will be RECORD's bytes plus our edit) or
    "shipped" (the file will be as shipped). log: what to do with this
    project's log of the edit ("write", "remove" or "keep").
    """

    action: str
    message: str
    enabled_by_project: bool = False
    upstream_enabled: bool = False
    record_stale: bool = False
    regexp: str = ""
    line: str = ""
    server_args: dict[str, Any] = field(default_factory=dict)
    decided_by: str = "RECORD"
    shipped_sha256: str = ""
    shipped_line: str = ""
    expect_sha256: str = ""
    outcome: str = "shipped"
    log: str = "keep"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _release(version: str) -> tuple[int, ...]:
    numbers = re.match(r"^(\d+(?:\.\d+)*)", version)
    return tuple(int(n) for n in numbers.group(1).split(".")) if numbers else ()


def _reinstall(version: str) -> str:
    pin = f"=={version}" if _release(version) else ""
    return (f"Reinstall SGLang to get the shipped file back (e.g. pip install --force-reinstall "
            f"--no-deps sglang{pin} with the virtualenv's pip).")


def _absent_message(report: GateReport, shipped: Optional[Shipped]) -> str:
    version = report.version
    where = (f'SGLang {version}: the gate {report.gate_function}() in {report.file} (lines '
             f'{report.gate_lines[0]}-{report.gate_lines[1]}) has no "{BACKEND}", entry, '
             f"commented or not. Searched: {', '.join(report.searched)}.")
    if shipped and shipped.sha256 != report.sha256:
        return (f"{where} The file also differs from what {shipped.record} names for it "
                f"(sha256 {report.sha256}, shipped {shipped.sha256}): the entry was removed or "
                f"the file edited since SGLang was installed. Nothing was changed. "
                f"{_reinstall(version)}")
    if _release(version) and _release(version) < (0, 5, 7):
        return (f"{where} This version cannot autotune the {BACKEND} MoE backend (0.5.6 and "
                f"older gate on attention backends behind --enable-flashinfer-autotune); use "
                f"SGLang 0.5.7 or later.")
    origin = "the file is as shipped (RECORD agrees)" if shipped else "there is no RECORD to compare with"
    return (f"{where} The entry is gone from this version's gate; {origin}. This role has no "
            f"line to edit here: check how SGLang {version} decides on {BACKEND} autotune, and "
            f"use --disable-flashinfer-autotune to turn autotune off.")


def plan_edit(report: GateReport, shipped: Optional[Shipped], record: Optional[dict[str, Any]],
              autotune: bool) -> Plan:
    """Decide the one edit (or none) that makes the gate match `autotune`.

    With RECORD (`shipped`), the file and RECORD alone decide; without it this
    falls back to this project's record of its own edits.
    """
    if report.state == "absent":
        raise GateError(_absent_message(report, shipped))
    if shipped is None:
        return _plan_from_record(report, record, autotune)

    version, where = report.version, f"{report.file}:{report.lineno}"
    data = Path(report.file).read_bytes()
    if report.state == "commented":
        edits = [(ENABLE_REGEXP, ENABLE_LINE)]
    else:
        edits = [(DISABLE_REGEXP, line) for line in DISABLE_LINES]
    toggled = {line: apply_edit(data, report.lineno, regexp, line) for regexp, line in edits}

    if report.sha256 == shipped.sha256:
        shipped_state, shipped_line = report.state, report.line
        back: Optional[tuple[str, str]] = None
    else:
        back = next(((regexp, line) for regexp, line in edits
                     if sha256_bytes(toggled[line]) == shipped.sha256), None)
        if back is None:
            regexp, line = edits[0]
            raise GateError(
                f"SGLang {version}: {report.file} is neither as shipped nor as shipped plus the "
                f"one-line edit of its \"{BACKEND}\", entry: its sha256 is {report.sha256}, "
                f"{shipped.record} names {shipped.sha256}, and with line {report.lineno} "
                f"{'uncommented' if report.state == 'commented' else 're-commented'} it would be "
                f"{sha256_bytes(toggled[line])}. So the file changed since it was installed, "
                f"by more than the comment of that entry: on another line, or on the entry line "
                f"itself (now {shown(report.line)}; a TAB or other whitespace where SGLang has "
                f"spaces counts). RECORD holds only hashes, so where cannot be located. Nothing "
                f"was changed. {_reinstall(version)}"
            )
        shipped_state = "enabled" if report.state == "commented" else "commented"
        shipped_line = apply_edit(data, report.lineno, *back).split(b"\n")[report.lineno - 1].decode("utf-8")

    upstream = shipped_state == "enabled"
    target = "commented" if shipped_state == "commented" and not autotune else "enabled"
    outcome = "shipped" if target == shipped_state else "patched"
    plan = Plan("none", "", upstream_enabled=upstream, shipped_sha256=shipped.sha256,
                shipped_line=shipped_line, outcome=outcome,
                log="write" if outcome == "patched" else "remove",
                enabled_by_project=outcome == "patched",
                server_args={} if autotune or not upstream else {"disable-flashinfer-autotune": True})
    if target == report.state:
        plan.expect_sha256 = report.sha256
        if outcome == "patched":
            plan.message = (f"SGLang {version}: {BACKEND} is already enabled at {where}; the file "
                            "is RECORD's bytes plus that one-line edit. Nothing to change.")
        elif not upstream:
            plan.message = (f"SGLang {version}: {BACKEND} is commented out as shipped (RECORD "
                            "agrees); autotune of that backend is off, nothing to change.")
        elif autotune:
            plan.message = (f"SGLang {version}: {BACKEND} autotune is enabled upstream (the file "
                            "is as shipped); no patch needed.")
        else:
            plan.message = (f"SGLang {version}: {BACKEND} autotune is enabled upstream; the file is "
                            "left as shipped and the server gets --disable-flashinfer-autotune.")
        return plan

    if target == "enabled":
        plan.action, plan.regexp, plan.line = "enable", ENABLE_REGEXP, ENABLE_LINE
        plan.expect_sha256 = sha256_bytes(toggled[ENABLE_LINE])
        plan.message = (f"SGLang {version}: uncommenting {BACKEND} at {where}"
                        + (", as shipped upstream." if upstream else "."))
    else:
        assert back is not None
        plan.action, plan.regexp, plan.line = "disable", back[0], back[1]
        plan.expect_sha256 = shipped.sha256
        plan.message = (f"SGLang {version}: restoring the shipped comment at {where} (the bytes "
                        f"{shipped.record} names).")
    if upstream and not autotune:
        plan.message += " The server gets --disable-flashinfer-autotune."
    _unique_edit(report, plan.regexp)
    return plan


def _plan_from_record(report: GateReport, record: Optional[dict[str, Any]], autotune: bool) -> Plan:
    """No RECORD lists the file (an editable or source install): this project's record decides."""
    version = report.version
    note = (" (No RECORD lists this file, an editable or source install: this project's own "
            "record of its edits decides, and a rollback cannot be checked against what was "
            "shipped.)")
    ours = bool(record) and record.get("file") == report.file
    if report.state == "commented":
        if not autotune:
            return Plan("none", f"SGLang {version}: {BACKEND} is commented out; autotune of that "
                        "backend is off, nothing to change." + note, record_stale=ours,
                        decided_by="record", log="remove" if ours else "keep")
        _unique_edit(report, ENABLE_REGEXP)
        data = Path(report.file).read_bytes()
        return Plan("enable", f"SGLang {version}: uncommenting {BACKEND} at "
                    f"{report.file}:{report.lineno}." + note, record_stale=ours,
                    regexp=ENABLE_REGEXP, line=ENABLE_LINE, decided_by="record",
                    shipped_sha256=report.sha256, shipped_line=report.line,
                    expect_sha256=sha256_bytes(apply_edit(data, report.lineno, ENABLE_REGEXP,
                                                          ENABLE_LINE)),
                    outcome="patched", log="write")

    # enabled
    if ours and record is not None and record.get("patched_sha256") == report.sha256:
        if autotune:
            return Plan("none", f"SGLang {version}: {BACKEND} already enabled by this project "
                        f"at {report.file}:{report.lineno}." + note, enabled_by_project=True,
                        decided_by="record", outcome="patched", expect_sha256=report.sha256)
        _unique_edit(report, DISABLE_REGEXP)
        original = str(record.get("original_line") or "")
        line = original.replace("\\", "\\\\") if ENTRY_RE.match(original) else DISABLE_LINE_DEFAULT
        return Plan("disable", f"SGLang {version}: restoring the original comment at "
                    f"{report.file}:{report.lineno}." + note, enabled_by_project=True,
                    regexp=DISABLE_REGEXP, line=line, decided_by="record",
                    expect_sha256=str(record.get("original_sha256") or ""), log="remove")
    if ours:
        if autotune:
            return Plan("none", f"SGLang {version}: {BACKEND} is enabled at "
                        f"{report.file}:{report.lineno}." + note, enabled_by_project=True,
                        decided_by="record", outcome="patched")
        raise GateError(
            f"SGLang {version}: {report.file} changed since this project patched it "
            f"(sha256 {report.sha256}, recorded {record.get('patched_sha256')}), so rolling "
            f"back cannot restore the original bytes. Reinstall SGLang to get the shipped "
            f"file back." + note
        )
    # Upstream enables the entry from 0.5.13 on: commenting it out would disable
    # what upstream enables, so the server flag is the supported off switch.
    if autotune:
        return Plan("none", f"SGLang {version}: {BACKEND} autotune is enabled upstream; "
                    "no patch needed." + note, upstream_enabled=True, decided_by="record")
    return Plan("none", f"SGLang {version}: {BACKEND} autotune is enabled upstream; the file "
                "is left as shipped and the server gets --disable-flashinfer-autotune." + note,
                upstream_enabled=True, server_args={"disable-flashinfer-autotune": True},
                decided_by="record")


def log_step(plan: Plan, report: GateReport, state_file: Path, shipped: Optional[Shipped]) -> tuple[str, str]:
    """(what to do with the log, its text): "keep" where the log already says it or is absent."""
    if plan.log == "remove":
        return ("remove" if file_kind(state_file) != "missing" else "keep"), ""
    if plan.log != "write":
        return "keep", ""
    text = json.dumps({
        "file": report.file,
        "version": report.version,
        "lineno": report.lineno,
        "decided_by": plan.decided_by,
        "shipped_record": shipped.record if shipped else "",
        "original_line": plan.shipped_line,
        "original_sha256": plan.shipped_sha256,
        "patched_sha256": plan.expect_sha256,
    }, indent=4, sort_keys=True) + "\n"
    try:
        same = file_kind(state_file) == "file" and state_file.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        same = False
    return ("keep" if same else "write"), text
