"""Names the project keeps: module_utils apart from modules, scenarios named for their roles, and
nothing that reads or cites a path outside the repository."""

from __future__ import annotations

import re
import subprocess

from conftest import REPO


def tracked() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()


def test_no_module_utils_shares_a_name_with_a_module():
    # On the target a module and the module_utils it imports share one namespace (AnsiballZ's
    # ansible.module_utils package next to the module): equal names hide one behind the other.
    modules = {path.stem for path in REPO.glob("roles/*/library/*.py")}
    utils = {path.stem for path in REPO.glob("roles/*/module_utils/*.py")}
    assert modules and utils
    assert not modules & utils, f"module_utils named as a module: {sorted(modules & utils)}"


def test_each_molecule_scenario_is_named_for_a_role_it_runs():
    roles = {path.name for path in (REPO / "roles").iterdir() if path.is_dir()}
    scenarios = [path.parent.name for path in REPO.glob("molecule/*/molecule.yml")]
    assert scenarios
    assert [name for name in scenarios if name not in roles] == []


def test_nothing_reads_or_cites_a_path_outside_the_repository():
    outside = re.compile(r"\.\./shared\b|/work/(?!\.\.)|\bshared/reference\b")
    found = []
    for name in tracked():
        path = REPO / name
        if name.startswith("tests/fixtures/") or name == "tests/test_project_names.py" or not path.is_file():
            continue   # captures from other machines hold their paths as printed; this file names the pattern
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if outside.search(line)]
    assert found == []


def test_every_module_a_role_or_playbook_names_exists():
    # "the lxc_link module" in a docstring outlived the module (issue 24: no comment naming a module
    # that does not exist). Names with an underscore only: "the json module" is Python's.
    named = re.compile(r"\b`?([a-z][a-z0-9]*_[a-z0-9_]+)`?(?:'s)? module\b")
    modules = {path.stem for path in REPO.glob("roles/*/library/*.py")}
    found = []
    for name in tracked():
        if name.startswith(("roles/", "playbooks/")) and name.endswith((".py", ".yml", ".md")):
            text = (REPO / name).read_text()
            found += [f"{name}:{n}: {match}" for n, line in enumerate(text.splitlines(), 1)
                      for match in named.findall(line) if match not in modules]
    assert found == []
