"""Locate an installed SGLang package and read its version, without importing it.

Shared by every module that reads SGLang's source (the autotune gate, the flag
checker): they all take either a package directory or the interpreter of the
SGLang virtualenv.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)

# find_spec locates the top-level package without executing its __init__, so
# no torch (or GPU) is needed.
FIND_SPEC = (
    "import importlib.util as u; s = u.find_spec('sglang'); "
    "print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')"
)


def locate_package(module: Any, package_dir: Optional[str], python: Optional[str]) -> Optional[str]:
    """The sglang package directory; None in check mode when SGLang is not installed yet.

    Outside check mode a missing interpreter or package fails the module with a
    message that says what to install or set.
    """
    if package_dir:
        return package_dir
    if not python or not Path(python).exists():
        if module.check_mode:
            return None
        module.fail_json(msg=f"no Python at {python}: expected the SGLang virtualenv's interpreter. "
                         "Install SGLang first (the sglang role), or give the package directory "
                         "(-e sglang_package_dir=DIR).")
    rc, out, err = module.run_command([python, "-c", FIND_SPEC])
    if rc != 0 or not out.strip():
        if module.check_mode:
            return None
        module.fail_json(msg=f"SGLang is not installed for {python} (find_spec('sglang') found "
                         f"nothing; {err.strip()}). Install SGLang into that virtualenv first, "
                         "or give the package directory (-e sglang_package_dir=DIR).")
    return out.strip()


def sglang_version(package_dir: Path) -> str:
    """The installed distribution's version, else the one in the package's source."""
    for dist_info in sorted(package_dir.parent.glob("sglang-*.dist-info")):
        metadata = dist_info / "METADATA"
        if metadata.is_file():
            for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    for name in ("_version.py", "version.py"):
        candidate = package_dir / name
        if candidate.is_file():
            match = VERSION_RE.search(candidate.read_text(encoding="utf-8", errors="replace"))
            if match:
                return match.group(1)
    return "unknown"


# The options every module reading SGLang's source takes: a package directory,
# or the interpreter of the virtualenv to find it from. Both are taken literally
# (type str): type path would expand $VAR and ~, so a directory named with a
# literal '$HOME' could not be given, and a refusal would name a path never given.
LOCATE_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "package_dir": {"type": "str"},
    "python": {"type": "str"},
}
LOCATE_REQUIRED_ONE_OF = [("package_dir", "python")]


def package_dir_problem(package_dir: Path, required: tuple[str, ...]) -> Optional[str]:
    """Why package_dir is not an SGLang package holding ``required`` (relative paths), or None."""
    if not package_dir.is_dir():
        return f"{package_dir} is not a directory."
    missing = [rel for rel in required if not (package_dir / rel).exists()]
    if missing:
        found = sorted(p.name for p in package_dir.iterdir())[:10]
        return (f"{package_dir} is not an SGLang package: expected {' and '.join(required)} in it, "
                f"found {found}.")
    return None
