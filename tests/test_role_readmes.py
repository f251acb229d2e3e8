"""Every role's README lists its variables as its argument spec and defaults have them.

A row per variable: `| `name` | type | default | meaning |`. The type is the spec's (`list of
ELEMENTS` for a list); the default is the value in defaults/main.yml as inline code, or, when it
is longer than LONG characters, a description that names defaults/main.yml; `required` or
`unset` where defaults/main.yml has none. A renamed, added or removed variable fails here.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import yaml
from conftest import REPO

LONG = 60
ROLES = sorted(path.parent.parent.name for path in (REPO / "roles").glob("*/meta/argument_specs.yml"))
ALL_ROLES = sorted(path.name for path in (REPO / "roles").iterdir() if path.is_dir())
ROW = re.compile(r"^\| `([a-z0-9_]+)` \|")


def options(role: str) -> dict[str, dict]:
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    found: dict[str, dict] = {}
    for entry in specs.values():
        for name, spec in (entry.get("options") or {}).items():
            found.setdefault(name, spec)
    return found


def defaults_of(role: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def rows(role: str, text: str) -> dict[str, list[str]]:
    """The README's variable rows: name -> its cells after the name (type, default, meaning)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if match and match.group(1).startswith(role + "_"):
            found.setdefault(match.group(1), [cell.strip() for cell in
                                              re.split(r"(?<!\\)\|", line.strip().strip("|"))][1:])
    return found


def shown(value: Any) -> str:
    """A default as the README writes it inside backticks."""
    if isinstance(value, str):
        text = value if value else '""'
    else:
        text = yaml.safe_dump(value, default_flow_style=True, width=math.inf).strip().removesuffix("...").strip()
    return text.replace("|", "\\|")


def problems(role: str, text: str, spec: dict[str, dict], defaults: dict[str, Any]) -> list[str]:
    """What the README text gets wrong about the role's variables; empty when it is right."""
    table = rows(role, text)
    found = [f"no row for {name}" for name in spec if name not in table]
    found += [f"a row for {name}, which the role does not have" for name in table if name not in spec]
    for name, option in spec.items():
        if name not in table:
            continue
        if len(table[name]) < 3 or not table[name][2]:
            found.append(f"{name}: expected type, default and meaning, found {table[name]}")
            continue
        kind, default = table[name][:2]
        want = option.get("type", "str")
        if want == "list" and option.get("elements"):
            want = f"list of {option['elements']}"
        if kind != want:
            found.append(f"{name}: type {kind!r}, the spec says {want!r}")
        if name not in defaults:
            expected = "required" if option.get("required") else "unset"
            if default != expected:
                found.append(f"{name}: default {default!r}, expected {expected!r} (none in defaults/main.yml)")
            continue
        value = shown(defaults[name])
        if len(value) > LONG or "\n" in value:
            if "`defaults/main.yml`" not in default:
                found.append(f"{name}: a long default must name `defaults/main.yml`, found {default!r}")
        elif default.strip("`").strip() != value:
            found.append(f"{name}: default {default!r}, defaults/main.yml has `{value}`")
    return found


@pytest.mark.parametrize("role", ROLES)
def test_each_variable_has_a_row_with_its_type_and_default(role):
    text = (REPO / "roles" / role / "README.md").read_text()
    assert problems(role, text, options(role), defaults_of(role)) == []


def gpu_host_row(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))


@pytest.mark.parametrize(("change", "needle"), [
    (lambda t: t.replace(gpu_host_row(t, "gpu_host_expected_gpus"), ""), "no row for gpu_host_expected_gpus"),
    (lambda t: t.replace("| `gpu_host_expected_gpus` | int | `8` |", "| `gpu_host_expected_gpus` | int | `7` |"),
     "gpu_host_expected_gpus: default '`7`'"),
    (lambda t: t.replace("| `gpu_host_modeset` | bool |", "| `gpu_host_modeset` | str |"), "gpu_host_modeset: type 'str'"),
    (lambda t: t.replace("| `gpu_host_modules` | list of str |", "| `gpu_host_modules` | list |"),
     "gpu_host_modules: type 'list'"),
    (lambda t: t + "\n| `gpu_host_gone` | int | `1` | removed long ago |\n", "gpu_host_gone, which the role does not have"),
    (lambda t: t.replace(gpu_host_row(t, "gpu_host_root"), "| `gpu_host_root` | path | `/` |"),
     "gpu_host_root: expected type, default and meaning"),
])
def test_a_wrong_readme_is_caught(change, needle):
    text = (REPO / "roles" / "gpu_host" / "README.md").read_text()
    assert problems("gpu_host", text, options("gpu_host"), defaults_of("gpu_host")) == []
    found = problems("gpu_host", change(text), options("gpu_host"), defaults_of("gpu_host"))
    assert any(needle in problem for problem in found), found


def test_long_required_and_unset_defaults_are_checked():
    spec = {"r_long": {"type": "list", "elements": "str"}, "r_req": {"required": True}, "r_unset": {"type": "path"}}
    defaults = {"r_long": [f"package-{n}" for n in range(10)]}
    good = ("| `r_long` | list of str | ten packages (`defaults/main.yml`) | x |\n"
            "| `r_req` | str | required | x |\n| `r_unset` | path | unset | x |\n")
    assert problems("r", good, spec, defaults) == []
    bad = good.replace(" (`defaults/main.yml`)", "").replace("required", "unset").replace("| path | unset", "| path | `/`")
    assert len(problems("r", bad, spec, defaults)) == 3


@pytest.mark.parametrize("role", ALL_ROLES)
def test_every_role_has_a_readme_that_the_main_readme_points_to(role):
    readme = REPO / "roles" / role / "README.md"
    assert readme.is_file(), f"roles/{role} has no README.md"
    assert readme.read_text().startswith(f"# {role}\n")
    assert f"roles/{role}/README.md" in (REPO / "README.md").read_text()


@pytest.mark.parametrize("role", sorted(set(ALL_ROLES) - set(ROLES)))
def test_a_role_without_variables_holds_no_tasks_and_names_its_users(role):
    """The shared roles (nvidia_discovery, sglang_locate): code only, listed as a dependency."""
    path = REPO / "roles" / role
    assert not (path / "tasks").exists() and not (path / "defaults").exists()
    text = (path / "README.md").read_text()
    assert "no tasks" in text
    users = [meta.parent.parent.name for meta in sorted((REPO / "roles").glob("*/meta/main.yml"))
             if role in [dep.get("role") if isinstance(dep, dict) else dep
                         for dep in yaml.safe_load(meta.read_text()).get("dependencies") or []]]
    assert users, f"no role lists {role} under dependencies"
    for user in users:
        assert f"`{user}`" in text, f"roles/{role}/README.md does not name {user}"
