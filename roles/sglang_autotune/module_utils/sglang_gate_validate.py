"""The check lineinfile runs on its temporary file before that file replaces SGLang's gate file.

sglang_autotune_gate hands lineinfile a `validate:` command that runs this file's source with the
target's Python (``python -I -c SOURCE TMPFILE EXPECTED``, stdlib only, nothing written): a bad edit
fails the task and never replaces the original. It predicts nothing of what lineinfile writes; it
asks of the temporary file what the proof asks of the file read back:

- it is UTF-8 Python that compiles;
- as shipped (a rollback, or the shipped state kept): its sha256 is the reference's (RECORD's);
- patched: line N is the entry in the decided state, and with line N put back as shipped its sha256
  is the reference's, so no other byte differs.

sglang_autotune_proof then reads the file back after the rename (the parsed gate, the log).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import shlex
import sys
from typing import Any

# The entry line, commented or not (sglang_gate reads it from here). Only a line that is exactly the
# list item counts: the TODO comment above it names the backend too and must never match.
ENTRY_RE = re.compile(r'^(?P<indent>[ \t]*)(?P<comment>#[ \t]*)?"flashinfer_cutlass",[ \t]*$')
BOM = b"\xef\xbb\xbf"


def entry_state(text: str) -> str:
    """'enabled' or 'commented' for the entry line, '' for any other line."""
    match = ENTRY_RE.match(text)
    if not match:
        return ""
    return "enabled" if match.group("comment") is None else "commented"


def with_line(data: bytes, lineno: int, text: str) -> bytes:
    """`data` with line `lineno` (1-based, LF-separated) put back as `text`; a BOM on line 1 stays.

    Used only to ask whether bytes are a reference's with that one line changed, never to predict
    what an edit will write.
    """
    lines = data.split(b"\n")
    bom = BOM if lineno == 1 and lines[0].startswith(BOM) else b""
    lines[lineno - 1] = bom + text.encode("utf-8")
    return b"\n".join(lines)


def expected(lineno: int, shipped_line: str, sha256: str, state: str, patched: bool) -> str:
    """The check's one argument besides the file: what the edit must leave (JSON)."""
    return json.dumps({"lineno": lineno, "shipped_line": shipped_line, "sha256": sha256, "state": state,
                       "patched": patched}, sort_keys=True)


def command(python: str, want: str) -> str:
    """lineinfile's `validate:`: this file's source run by `python` on the temporary file (its %s), with
    `want` (expected()); a % of the command's own is doubled, as lineinfile formats the string."""
    words = [shlex.quote(python), "-I", "-c", shlex.quote(inspect.getsource(sys.modules[__name__])), "%s",
             shlex.quote(want)]
    return " ".join(word if word == "%s" else word.replace("%", "%%") for word in words)


def problems(data: bytes, want: dict[str, Any]) -> list[str]:
    """What is wrong with the edited bytes; empty when they may replace the gate file."""
    try:
        source = data.decode("utf-8-sig")
        compile(source, "the edited file", "exec")
    except (UnicodeDecodeError, SyntaxError, ValueError) as exc:
        return [f"the edited file is not Python that compiles: {exc}"]
    lines = data.split(b"\n")
    lineno = want["lineno"]
    if not want["patched"]:
        digest = hashlib.sha256(data).hexdigest()
        return [] if digest == want["sha256"] else [
            f"its sha256 is {digest}, not the {want['sha256']} of the file as shipped"]
    if not 1 <= lineno <= len(lines):
        return [f"it has {len(lines)} lines, no line {lineno}"]
    line = lines[lineno - 1]
    text = (line[len(BOM):] if lineno == 1 and line.startswith(BOM) else line).decode("utf-8")
    found = [] if entry_state(text) == want["state"] else [
        f"line {lineno} is {text.strip()!r}, not the flashinfer_cutlass entry {want['state']}"]
    digest = hashlib.sha256(with_line(data, lineno, want["shipped_line"])).hexdigest()
    if digest != want["sha256"]:
        found.append(f"with line {lineno} put back as shipped its sha256 is {digest}, not the reference's "
                     f"{want['sha256']}: another line differs")
    return found


def main(argv: list[str]) -> int:
    with open(argv[1], "rb") as handle:
        data = handle.read()
    found = problems(data, json.loads(argv[2]))
    for problem in found:
        sys.stderr.write(f"The edit of SGLang's autotune gate is refused before it replaces the file: {problem}.\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
