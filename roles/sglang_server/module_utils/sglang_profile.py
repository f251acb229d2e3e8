"""The tuned profile resolved against one release's flag table: argv, notes, or every problem.

A profile is {flag name without dashes: value}. Each flag is spelled as the
installed release wants it (aliases become the canonical name, known renames
the spelling this release accepts), each value is checked (switch or value,
one value or several, int/float, choices), and every problem is collected
before anything fails. Argparse prefix abbreviations (``--tp`` for
``--tp-size``) are not accepted: only full spellings are.

Standard library only, so it runs as Ansible module_utils on the target.
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass
from typing import Any, Optional

from ansible.module_utils.sglang_flag_table import FlagError, FlagSpec

# Known renames between releases, both directions: the profile may use either
# spelling and gets the one the installed release accepts. Only 1:1 renames
# whose value means the same on both sides belong here.
FLAG_RENAMES: dict[str, str] = {
    # NSA -> DSA: 0.5.13 added --dsa-*-backend and kept --nsa-*-backend as a
    # deprecated alias (same dest, same choices); 0.5.23 dropped the alias.
    "nsa-prefill-backend": "dsa-prefill-backend",
    "nsa-decode-backend": "dsa-decode-backend",
    "dsa-prefill-backend": "nsa-prefill-backend",
    "dsa-decode-backend": "nsa-decode-backend",
}


@dataclass
class Resolution:
    """A profile resolved against one installed SGLang."""

    argv: list[str]
    notes: list[str]
    version: str
    flag_count: int = 0

    @property
    def command_line(self) -> str:
        return shlex.join(self.argv)


def flag_words(flag: str, texts: list[str]) -> list[str]:
    """``--flag v1 v2``; ``--flag=-x`` for one value that argparse would take for a flag."""
    if len(texts) == 1 and texts[0].startswith("-") and not _is_number(texts[0]):
        return [f"--{flag}={texts[0]}"]
    return [f"--{flag}", *texts]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _translation(name: str, spec: Optional[FlagSpec],
                 index: dict[str, FlagSpec]) -> Optional[FlagSpec]:
    """The flag to emit instead of `name`, for renames whose meaning is the same:
    FLAG_RENAMES, or a deprecated alias that stores into the same dest as the
    flag SGLang itself names as its replacement."""
    if spec is not None and spec.usable:
        return None
    candidates: list[FlagSpec] = []
    target = FLAG_RENAMES.get(name)
    if target and target in index:
        candidates.append(index[target])
    if spec is not None and spec.replacement and re.fullmatch(r"--[a-z0-9-]+", spec.replacement):
        new = index.get(spec.replacement[2:])
        if new is not None and new.dest == spec.dest and new.is_switch == spec.is_switch:
            candidates.append(new)
    return next((c for c in candidates if c.usable and c is not spec), None)


def _check_value(flag: str, spec: FlagSpec, value: Any) -> tuple[list[str], Optional[str]]:
    """One value -> (problems, argv string)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return [f"--{flag}: unsupported value {value!r} ({type(value).__name__}); "
                "use a string or a number"], None
    text = str(value)
    problems = []
    compared = text
    if spec.value_type in ("int", "float"):
        try:
            compared = str((int if spec.value_type == "int" else float)(text))
        except ValueError:
            problems.append(f"--{flag} takes an {spec.value_type} value, got {text!r}")
    if spec.choices is not None and compared not in spec.choices:
        close = difflib.get_close_matches(text, spec.choices, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        problems.append(f"--{flag}: invalid choice {text!r}{hint}; valid choices: "
                        f"{', '.join(spec.choices)}")
    return problems, text


def _unknown_flag(name: str, all_names: list[str], version: str) -> str:
    close = difflib.get_close_matches(name, all_names, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join('--' + c for c in close)}?" if close else ""
    prefixed = [n for n in all_names if n.startswith(name)]
    if prefixed and not close:
        hint = (f"; argparse would take it as an abbreviation of "
                f"{', '.join('--' + c for c in prefixed[:3])}"
                f"{' (ambiguous)' if len(prefixed) > 1 else ''}, but the profile must "
                "spell flags in full")
    return f"--{name} is not a flag of SGLang {version}{hint}"


def _value_words(spec: FlagSpec, value: Any, notes: list[str]) -> tuple[list[str], list[str]]:
    """(argv words, problems) for one flag given `value` (not None, not False)."""
    flag = spec.name
    if value is True:
        if spec.is_switch or spec.optional_value:
            return [f"--{flag}"], []
        what = f" (one of: {', '.join(spec.choices)})" if spec.choices else ""
        return [], [f"--{flag} needs a value{what}; the profile gives it as a bare switch (true)"]
    if spec.is_switch:
        hint = ""
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
            hint = " (a string: pass a YAML boolean, not a quoted one)"
        return [], [f"--{flag} is a switch and takes no value, got {value!r}{hint}; "
                    "use true to pass it, false to leave it out"]
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(value, (list, tuple)) and not spec.multiple:
        return [], [f"--{flag} takes one value, got a list of {len(values)}: {value!r}"]
    if isinstance(spec.nargs, int) and spec.nargs > 1 and len(values) != spec.nargs:
        return [], [f"--{flag} takes exactly {spec.nargs} values, got {len(values)}"]
    if spec.nargs == "+" and not values:
        return [], [f"--{flag} needs at least one value, got an empty list"]
    texts: list[str] = []
    problems: list[str] = []
    for item in values:
        found, text = _check_value(flag, spec, item)
        problems.extend(found)
        if text is not None:
            texts.append(text)
    if problems:
        return [], problems
    if spec.choices is None and spec.choices_expr:
        notes.append(f"--{flag}: its choices ({spec.choices_expr}) are computed at run time; "
                     "the value was not checked")
    return flag_words(flag, texts), []


def resolve_profile(flags: dict[str, FlagSpec], profile: dict[str, Any],
                    version: Optional[str] = None, require: bool = False) -> Resolution:
    """Turn a profile {flag name without dashes: value} into argv for this SGLang.

    True: bare switch; False/None: left out (not checked, so a profile may keep
    a flag that some releases lack, switched off); a list: several values (flags
    with nargs only); anything else: one value. Known renames become the spelling this
    release accepts (with a note). With ``require``, a flag SGLang declares
    required (--model-path) must be given. Names are taken as given (one or two
    leading dashes dropped), never stripped of whitespace: the caller normalises.
    All problems are collected; any problem raises FlagError listing every one.
    """
    if version is None:
        version = getattr(flags, "version", "unknown")
    index = {spelling: spec for spec in flags.values() for spelling in spec.spellings}
    all_names = sorted(index)
    argv: list[str] = []
    notes: list[str] = []
    problems: list[str] = []
    emitted: dict[str, str] = {}

    for raw_name, value in profile.items():
        name = str(raw_name).lstrip("-")
        if value is None or value is False:
            continue
        spec = index.get(name)
        new = _translation(name, spec, index)
        if new is not None:
            notes.append(f"--{name} is a deprecated alias of --{new.name} in SGLang {version}; "
                         f"using --{new.name}" if spec is not None
                         else f"--{name} is spelled --{new.name} in SGLang {version}")
            spec = new
        elif spec is None:
            problems.append(_unknown_flag(name, all_names, version))
            continue
        if spec.removed is not None:
            problems.append(f"--{name} is no longer accepted by SGLang {version}: {spec.removed}")
            continue
        if spec.name != name and new is None:
            notes.append(f"--{name} is an alias of --{spec.name} in SGLang {version}; "
                         f"using --{spec.name}")
        if spec.ignored:
            notes.append(f"--{spec.name} is accepted but ignored by SGLang {version} "
                         "(deprecated, no effect)")
        elif spec.deprecated and new is None:
            instead = f"; SGLang suggests {spec.replacement}" if spec.replacement else ""
            notes.append(f"--{spec.name} is deprecated in SGLang {version} (still accepted, "
                         f"warns at start){instead}")
        if spec.name in emitted:
            problems.append(f"--{spec.name} is given twice (as --{emitted[spec.name]} and --{name})")
            continue
        emitted[spec.name] = name
        words, found = _value_words(spec, value, notes)
        argv += words
        problems += found

    if require:
        for spec in flags.values():
            if spec.required and spec.name not in emitted:
                dropped = [n for n in spec.spellings
                           if n in profile and (profile[n] is None or profile[n] is False)]
                why = (f"the profile drops it ({dropped[0]}: {profile[dropped[0]]!r})" if dropped
                       else "the profile leaves it out")
                problems.append(f"--{spec.name} is required by SGLang {version} and {why}; "
                                "set it (for --model-path: sglang_server_model_path)")
    if problems:
        count = len(problems)
        raise FlagError(
            f"SGLang {version} rejects the flag profile ({count} problem"
            f"{'s' if count != 1 else ''}):\n" + "\n".join(f"  - {p}" for p in problems),
            problems,
        )
    return Resolution(argv=argv, notes=notes, version=version, flag_count=len(flags))
