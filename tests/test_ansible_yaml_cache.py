"""The tests' cache of the YAML Ansible parses out of its own files (tests/run_caches): what is
read back equals, tags included, what PyYAML gives; each call gets its own objects; YAML from
anywhere else is never kept; any fault of the cache parses as without it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import yaml
from conftest import RUN_CACHE_HOOK, python_says

import ansible.plugins.become.sudo as sudo_plugin
from ansible._internal._datatag import _tags
from ansible.module_utils._internal._datatag import AnsibleTagHelper
from ansible.parsing.yaml.loader import AnsibleLoader
from ansible.utils.collection_loader import _collection_meta

sys.path.insert(0, RUN_CACHE_HOOK)
import ansible_yaml_cache as cache  # noqa: E402  (test infrastructure, not shipped: on PYTHONPATH in the tests)

PLUGIN = sudo_plugin.__file__


def doc(path: str = PLUGIN, text: str = sudo_plugin.DOCUMENTATION) -> str:
    """What ansible.plugins.loader hands yaml.load for a plugin's options."""
    return _tags.Origin(path=path).tag(_tags.TrustedAsTemplate().tag(text))


def same(left, right, where: str = "") -> None:
    """Equal, of the same types, with the same tags, all the way down."""
    assert type(left) is type(right), where
    assert AnsibleTagHelper.tags(left) == AnsibleTagHelper.tags(right), where
    if isinstance(left, dict):
        assert list(left) == list(right), where
        for (key, value), other in zip(left.items(), right):
            same(key, other, f"{where}/key")
            same(value, right[other], f"{where}/{key}")
    elif isinstance(left, list):
        assert len(left) == len(right), where
        for index, (value, other) in enumerate(zip(left, right)):
            same(value, other, f"{where}[{index}]")
    else:
        assert left == right, where


def patched(tmp_path: Path) -> SimpleNamespace:
    module = SimpleNamespace(load=yaml.load)
    cache.cache_yaml_load(str(tmp_path), module)
    return module


def test_a_plugins_documentation_is_read_back_as_parsed_tags_and_all(tmp_path):
    module = patched(tmp_path)
    first = module.load(doc(), Loader=AnsibleLoader)
    assert len(list(tmp_path.iterdir())) == 1
    second = module.load(doc(), Loader=AnsibleLoader)
    expected = yaml.load(doc(), Loader=AnsibleLoader)
    same(first, expected)
    same(second, expected)
    assert _tags.Origin.get_tag(second["options"]["become_user"]["description"]).path == PLUGIN
    second["options"].clear()   # a caller's change is its own: the next call reads the entry again
    same(module.load(doc(), Loader=AnsibleLoader), expected)


def test_another_origin_or_trust_is_another_entry(tmp_path):
    module = patched(tmp_path)
    module.load(doc(), Loader=AnsibleLoader)
    untrusted = _tags.Origin(path=PLUGIN).tag(sudo_plugin.DOCUMENTATION)
    read = module.load(untrusted, Loader=AnsibleLoader)
    assert not _tags.TrustedAsTemplate.is_tagged_on(read["options"]["become_user"]["description"])
    moved = _tags.Origin(path=PLUGIN, line_num=7).tag(sudo_plugin.DOCUMENTATION)
    assert _tags.Origin.get_tag(module.load(moved, Loader=AnsibleLoader)["short_description"]).line_num > 7
    assert len(list(tmp_path.iterdir())) == 3


def test_yaml_from_outside_ansibles_installed_files_is_never_kept(tmp_path):
    module = patched(tmp_path)
    playbook = tmp_path / "site.yml"
    playbook.write_text("- hosts: all\n  tasks: []\n")
    assert module.load(doc(str(playbook), playbook.read_text()), Loader=AnsibleLoader) == [{"hosts": "all", "tasks": []}]
    assert module.load("a: 1", Loader=yaml.SafeLoader) == {"a": 1}
    with open(playbook, "rb") as stream:
        assert module.load(stream, Loader=yaml.SafeLoader) == [{"hosts": "all", "tasks": []}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site.yml"]


def test_ansibles_config_definitions_file_is_kept_and_read_back(tmp_path):
    module = patched(tmp_path)
    base = Path(_collection_meta.__file__).parents[2] / "config" / "base.yml"
    with open(base, "rb") as stream:
        first = module.load(stream, Loader=yaml.SafeLoader)
    with open(base, "rb") as stream:
        second = module.load(stream, Loader=yaml.SafeLoader)
    assert first == second == yaml.safe_load(base.read_bytes()) and first is not second
    assert len(list(tmp_path.iterdir())) == 1


def test_the_routing_table_is_kept_by_content(tmp_path):
    module = SimpleNamespace(_meta_yml_to_dict=_collection_meta._meta_yml_to_dict)
    cache.cache_routing(str(tmp_path), module)
    runtime = (Path(_collection_meta.__file__).parents[2] / "config" / "ansible_builtin_runtime.yml").read_bytes()
    expected = _collection_meta._meta_yml_to_dict(runtime, ("ansible.builtin", "runtime.yml"))
    for _ in range(2):
        assert module._meta_yml_to_dict(runtime, ("ansible.builtin", "runtime.yml")) == expected
    assert module._meta_yml_to_dict(b"plugin_routing: {}\n", ("x.y", "runtime.yml")) == {"plugin_routing": {}}
    assert len(list(tmp_path.iterdir())) == 2


def test_a_corrupt_entry_or_an_unwritable_cache_parses_as_without_it(tmp_path):
    module = patched(tmp_path / "cache")
    expected = yaml.load(doc(), Loader=AnsibleLoader)
    same(module.load(doc(), Loader=AnsibleLoader), expected)
    (entry,) = (tmp_path / "cache").iterdir()
    for junk in (b"", b"\x80\x05garbage", b"not a pickle"):
        entry.write_bytes(junk)
        same(module.load(doc(), Loader=AnsibleLoader), expected)
    not_a_dir = tmp_path / "a_file"
    not_a_dir.write_text("")
    same(patched(not_a_dir / "cache").load(doc(), Loader=AnsibleLoader), expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "cache"]   # no partial file left


def test_a_python_started_by_the_tests_parses_ansibles_yaml_through_the_cache(tmp_path):
    """As ansible-playbook does: PYTHONPATH from tests/conftest.py; by default in ~/.cache; off when empty."""
    assert RUN_CACHE_HOOK in os.environ["PYTHONPATH"].split(os.pathsep)
    probe = ("import yaml; from ansible.utils.collection_loader import _collection_finder as f\n"
             "print(getattr(yaml.load, 'ansible_yaml_cache', None), f._meta_yml_to_dict.__name__)\n"
             "from ansible import constants\n")
    assert python_says(probe, ANSIBLE_YAML_CACHE=str(tmp_path / "cache")).split() == [
        str(tmp_path / "cache"), "meta_yml_to_dict"]
    assert len(list((tmp_path / "cache").iterdir())) == 1   # base.yml, read by ansible.constants
    default = python_says("import yaml; print(yaml.load.ansible_yaml_cache)", ANSIBLE_YAML_CACHE=None)
    assert default == str(Path.home() / ".cache" / "sglang-deploy" / "ansible-yaml")
    off = python_says("import yaml; print(hasattr(yaml.load, 'ansible_yaml_cache'))", ANSIBLE_YAML_CACHE="")
    assert off == "False"
