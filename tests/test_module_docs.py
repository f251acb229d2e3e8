"""Every module's DOCUMENTATION, EXAMPLES and RETURN are YAML that ansible-doc can read.

ansible-lint and the playbooks never parse them, so a broken block (a flow mapping with a quote
in it, say) would ship unseen; ansible-doc then shows nothing for the module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from conftest import REPO

MODULES = sorted(REPO.glob("roles/*/library/*.py"))


def blocks(path: Path) -> dict[str, str]:
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN") \
                and isinstance(node.value, ast.Constant):
            found[node.targets[0].id] = node.value.value
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_the_module_documents_itself_in_yaml(path):
    found = blocks(path)
    assert "DOCUMENTATION" in found, f"{path} has no DOCUMENTATION"
    doc = yaml.safe_load(found["DOCUMENTATION"])
    assert doc["module"] == path.stem
    assert isinstance(doc.get("short_description"), str) and doc["short_description"]
    assert texts(doc.get("description")), f"{path.stem}: description {doc.get('description')!r}"
    assert options_described(doc.get("options") or {}) == [], path.stem
    if "EXAMPLES" in found:
        yaml.safe_load(found["EXAMPLES"])
    if "RETURN" in found:
        returned = yaml.safe_load(found["RETURN"]) or {}
        assert [name for name, field in returned.items() if not texts(field.get("description"))] == [], path.stem


def texts(value) -> bool:
    """A description ansible-doc can show: a string or a list of strings (a "- a: b" item is a dict)."""
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(item, str) and item for item in items)


def options_described(options: dict, prefix: str = "") -> list[str]:
    bad = []
    for name, option in options.items():
        if not isinstance(option, dict) or not texts(option.get("description")):
            bad.append(prefix + name)
        elif isinstance(option.get("suboptions"), dict):
            bad += options_described(option["suboptions"], f"{prefix}{name}.")
    return bad


def test_a_description_item_that_yaml_reads_as_a_mapping_is_caught(tmp_path):
    # What three modules had: "- With X, the container has no network: ..." is a dict, not a line.
    (tmp_path / "mapped.py").write_text('DOCUMENTATION = r"""\nmodule: mapped\nshort_description: x\ndescription:\n'
                                        '  - With I(bridge) empty, the container has no network: none at all.\n"""\n')
    with pytest.raises(AssertionError, match="description"):
        test_the_module_documents_itself_in_yaml(tmp_path / "mapped.py")


def test_a_broken_block_is_caught(tmp_path):
    broken = tmp_path / "broken.py"
    # What nine modules had: a ": " in a plain scalar (found by this test, mended with >-).
    broken.write_text('DOCUMENTATION = r"""\nmodule: broken\nshort_description: x\noptions:\n  config_format:\n'
                      '    description: C(lxc) writes C(key = value), C(proxmox) writes C(key: value).\n"""\n')
    with pytest.raises(yaml.YAMLError):
        test_the_module_documents_itself_in_yaml(broken)
