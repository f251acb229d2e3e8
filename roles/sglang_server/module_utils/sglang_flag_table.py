"""The flag table: what one SGLang release's server parser declares.

Each flag by its canonical name: its other spellings, whether it is a switch,
the values it takes (choices, nargs, int/float) and whether SGLang refuses to
start without it. The static reader (sglang_argparse_reader) fills it from the
release's source; the tuned profile (sglang_profile) is resolved against it.

Standard library only, so it runs as Ansible module_utils on the target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


class FlagError(Exception):
    """The profile or the installation is not usable; the message says why."""

    def __init__(self, message: str, problems: Optional[list[str]] = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


@dataclass
class FlagSpec:
    """One command-line flag as the installed SGLang's argparse parser sees it.

    ``name`` and ``aliases`` are spellings without the leading dashes.
    ``choices`` is None when any value is accepted (or the list is computed at
    run time; ``choices_expr`` then says what it is). ``nargs`` is argparse's
    nargs for flags that take values (None: exactly one). ``replacement`` is
    SGLang's own pointer for deprecated flags, verbatim (e.g.
    ``--dsa-prefill-backend``). ``removed``: SGLang's message for a flag it
    still declares only to refuse it. ``ignored``: accepted, but its action
    stores nothing. ``negates``: the ``--no-*`` twin of a BooleanOptionalAction.
    ``required``: SGLang's parser refuses to start without it.
    """

    name: str
    aliases: list[str] = field(default_factory=list)
    choices: Optional[list[str]] = None
    is_switch: bool = False
    deprecated: bool = False
    replacement: Optional[str] = None
    nargs: Any = None
    value_type: str = "str"
    dest: str = ""
    removed: Optional[str] = None
    ignored: bool = False
    negates: Optional[str] = None
    choices_expr: Optional[str] = None
    source: str = ""
    required: bool = False

    @property
    def spellings(self) -> list[str]:
        return [self.name, *self.aliases]

    @property
    def optional_value(self) -> bool:
        return not self.is_switch and self.nargs in ("?", "*")

    @property
    def multiple(self) -> bool:
        return self.nargs in ("+", "*") or (isinstance(self.nargs, int) and self.nargs > 1)

    @property
    def usable(self) -> bool:
        """Accepted without a deprecation warning."""
        return not self.deprecated and self.removed is None


class FlagTable(dict):
    """dict[str, FlagSpec] by canonical name that also knows which SGLang it was read from.

    A plain dict subclass (not a dataclass: a dataclass without fields would
    make every two tables compare equal); equality is the dict's.
    """

    def __init__(self, *args: Any, version: str = "unknown", package_dir: str = "",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.version = version
        self.package_dir = package_dir

    def by_spelling(self) -> dict[str, FlagSpec]:
        """Every spelling argparse accepts in full (aliases too) -> its flag."""
        return {spelling: spec for spec in self.values() for spelling in spec.spellings}

    def config_flag(self) -> str:
        """How this release reads options from a YAML file (``--config``), or ''."""
        config = self.get("config")
        return f"--{config.name}" if config is not None and not config.is_switch else ""
