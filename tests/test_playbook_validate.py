"""playbooks/validate.yml: the check an operator runs before switching nightlies.

`ansible-playbook -i localhost, -c local playbooks/validate.yml -e sglang_package_dir=DIR`
against real SGLang trees: it prints the effective command line, each flag
spelled as that version wants, and fails clearly on invalid flags.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_cases, run_playbook, sglang_wheel, tree_digest

SECRET = "sk-hostile-0123456789"
ROLE = REPO / "roles" / "sglang_server"


def unpack_flag_sources(version: str, dest: Path) -> Path:
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        for name in wheel.namelist():
            if name in ("sglang/__init__.py", "sglang/version.py", "sglang/_version.py") or (
                name.startswith(("sglang/srt/server_args", "sglang/srt/arg_groups/",
                                 "sglang/srt/model_executor/cuda_graph_config"))
                and name.endswith(".py")
            ) or name == f"sglang-{version}.dist-info/METADATA":
                wheel.extract(name, dest)
    return dest / "sglang"


def validate(tmp_path: Path, version: str, *extra: str, package: Path | None = None):
    package = package or unpack_flag_sources(version, tmp_path / "tree")
    private = tmp_path / "runner"
    private.mkdir()
    before = tree_digest(package.parent)
    run = run_playbook(private, "validate.yml", ["-e", f"sglang_package_dir={package}",
                                                 "-e", "sglang_server_model_check=false", *extra])
    assert tree_digest(package.parent) == before
    return run


@pytest.mark.parametrize(
    ("version", "spelling"),
    [("0.5.12", "--nsa-prefill-backend trtllm --nsa-decode-backend trtllm"),
     ("0.5.13", "--dsa-prefill-backend trtllm --dsa-decode-backend trtllm"),
     ("0.5.23", "--dsa-prefill-backend trtllm --dsa-decode-backend trtllm")],
)
def test_default_profile_spelled_for_the_version(tmp_path, version, spelling):
    run = validate(tmp_path, version)
    assert run.status == "successful", run.stdout
    assert run.changed == 0
    assert f"SGLang {version}: python -m sglang.launch_server --model-path /models/GLM-5-NVFP4" in run.stdout
    flat = " ".join(run.stdout.split())
    assert spelling in flat
    for flag in ("--tp-size 8", "--quantization modelopt_fp4", "--moe-runner-backend flashinfer_cutlass",
                 "--max-running-requests 1024", "--disable-cuda-graph", "--disable-radix-cache"):
        assert flag in flat


def test_overrides_and_drops(tmp_path):
    extra = json.dumps({"sglang_server_extra_flags": {"disable-radix-cache": False, "attention-backend": "triton"}})
    run = validate(tmp_path, "0.5.23", "-e", extra)
    assert run.status == "successful", run.stdout
    flat = " ".join(run.stdout.split())
    assert "--attention-backend triton" in flat
    assert "--disable-radix-cache" not in flat


def test_release_without_trtllm_nsa_backend_is_refused(tmp_path):
    run = validate(tmp_path, "0.5.8")
    assert run.status == "failed"
    message = " ".join(run.failures)
    assert "nsa-prefill-backend" in message and "trtllm" in message
    assert "flashmla_sparse" in message  # the valid choices are listed


def test_bad_flags_all_reported(tmp_path):
    extra = json.dumps({"sglang_server_extra_flags": {"moe-runer-backend": "flashinfer_cutlass",
                                                      "quantization": "nvfp5"}})
    run = validate(tmp_path, "0.5.23", "-e", extra)
    assert run.status == "failed"
    message = " ".join(run.failures)
    assert "moe-runer-backend" in message and "moe-runner-backend" in message
    assert "nvfp5" in message and "modelopt_fp4" in message


def test_unit_out_written_for_review_without_the_secret(tmp_path):
    out = tmp_path / "review" / "sglang.service"
    out.parent.mkdir()
    extra = json.dumps({"sglang_server_unit_out": str(out), "sglang_server_api_key": "sk-never-shown",
                        "sglang_server_served_model_name": "glm 100% $HOME"})
    run = validate(tmp_path, "0.5.23", "-e", extra, "--diff", "-v")
    assert run.status == "successful", run.stdout
    text = out.read_text()
    assert '"--served-model-name" "glm 100%% $$HOME"' in text
    # SGLang reads the key from a 0600 file with --config: not on its command line.
    assert '"--config" "/etc/sglang/sglang.secrets.yaml"' in text
    assert "api-key" not in text and "${" not in text
    assert '"--dsa-prefill-backend" "trtllm"' in text
    assert "sk-never-shown" not in text and "sk-never-shown" not in run.stdout
    assert "The API key is in /etc/sglang/sglang.secrets.yaml (0600, sglang)" in " ".join(run.stdout.split())


def test_release_without_config_keeps_the_environment_way_and_says_so(tmp_path):
    package = unpack_flag_sources("0.5.12", tmp_path / "tree")
    server_args = package / "srt" / "server_args.py"
    text = server_args.read_text()
    assert text.count('"--config",') == 1
    server_args.write_text(text.replace('"--config",', '"--config-gone-in-this-test",'))
    out = tmp_path / "review" / "sglang.service"
    out.parent.mkdir()
    extra = json.dumps({"sglang_server_unit_out": str(out), "sglang_server_api_key": SECRET})
    run = validate(tmp_path, "0.5.12", "-e", extra, "--diff", "-v", package=package)
    assert run.status == "successful", run.stdout
    unit = out.read_text()
    assert '"--api-key" ${SGLANG_SERVER_API_KEY}' in unit and "--config" not in unit
    flat = " ".join(run.stdout.split())
    assert "SGLang 0.5.12 has no --config: the API key is in the 0600 environment file" in flat
    assert "--api-key ${SGLANG_SERVER_API_KEY}" in flat
    assert SECRET not in run.stdout and SECRET not in unit


def test_effective_flags_from_every_way_in(tmp_path):
    extra = json.dumps({"sglang_server_extra_flags": {"--tp-size": 4, "port": 31000, "host": "0.0.0.0"},
                        "sglang_server_unit_out": str(tmp_path / "sglang.service")})
    run = validate(tmp_path, "0.5.23", "-e", extra, "-v")
    assert run.status == "successful", run.stdout
    effective = run.returned("sglang_server")["effective"]
    assert (effective["tp_size"], effective["port"], effective["host"]) == (4, 31000, "0.0.0.0")
    assert effective["ready_url"] == "http://127.0.0.1:31000/health_generate"
    unit = " ".join((tmp_path / "sglang.service").read_text().replace("\\\n", " ").split())
    assert '"--tp-size" "4"' in unit and '"--port" "31000"' in unit and '"--host" "0.0.0.0"' in unit
    assert unit.count('"--tp-size"') == 1 and '"--port" "30000"' not in unit


BAD = [
    ({"sglang_server_port": 70000}, "sglang_server_port must be a port number 1-65535, got 70000"),
    ({"sglang_server_tp_size": 0}, "sglang_server_tp_size must be an integer >= 1, got 0"),
    ({"sglang_server_host": "0.0.0.0 ::"}, "sglang_server_host must be one IP address or host name"),
    ({"sglang_server_served_model_name": "glm-5\n"}, "contains the control character '\\n'"),
    ({"sglang_server_environment": {"X": "a\nExecStartPre=/bin/sh"}},
     "sglang_server_environment['X'] contains the control character"),
    ({"sglang_server_environment": {"BAD NAME": "x"}}, "'BAD NAME' is not an environment variable name"),
    ({"sglang_server_extra_flags": {"api-key": SECRET}}, "through sglang_server_api_key (Ansible Vault)"),
    ({"sglang_server_extra_flags": {"--api-key": SECRET}}, "through sglang_server_api_key (Ansible Vault)"),
    ({"sglang_server_extra_flags": {"api-key ": SECRET}}, "key 'api-key ' is not a flag name: it has U+0020"),
    ({"sglang_server_extra_flags": {"api-key\u00a0": SECRET}}, "it has U+00A0 (no-break space) at position 7"),
    ({"sglang_server_extra_flags": {"api-key\t": SECRET}}, "it has U+0009"),
    ({"sglang_server_extra_flags": {"port": 70000}},
     "sglang_server_extra_flags['port'] must be a port number 1-65535, got 70000"),
    ({"sglang_server_extra_flags": {"port": 0}}, "sglang_server_extra_flags['port'] must be a port number"),
    ({"sglang_server_extra_flags": {"tp-size": 0}}, "sglang_server_extra_flags['tp-size'] must be an integer >= 1"),
    ({"sglang_server_extra_flags": {"host": "a b,c"}},
     "sglang_server_extra_flags['host'] must be one IP address or host name, got 'a b,c'"),
    ({"sglang_server_extra_flags": {"model-path": None}}, "--model-path cannot be left out"),
    ({"sglang_server_unit_name": "sglang.service"}, "sglang_server_unit_name must be a unit name systemd accepts"),
    ({"sglang_server_unit_name": "sglang@x"}, "got 'sglang@x'"),
    ({"sglang_server_unit_name": "-sglang"}, "got '-sglang'"),
    ({"sglang_server_unit_name": "sglang.socket"}, "'sglang.socket' ends in '.socket'"),
    ({"sglang_server_unit_name": "sglang.timer"}, "so systemctl would address that timer unit"),
    ({"sglang_server_extra_flags": {f"api-key={SECRET}": True}},
     "sglang_server_extra_flags key 'api-key=...' is not a flag name: it has '=' (what follows it is not shown)"),
    ({"sglang_server_environment": "A=1"},
     "sglang_server_environment must be a mapping of variable name -> value (e.g. {HF_HOME: /data/hf}), got a str"),
    ({"sglang_server_environment": {"HF_TOKEN": SECRET}},
     "sglang_server_environment sets HF_TOKEN; set sglang_server_hf_token instead"),
    ({"sglang_server_ready_path": "health"}, "sglang_server_ready_path must be a URL path starting with '/'"),
    ({"sglang_server_python": "/opt/my venv/bin/python"}, "sglang_server_python must be an absolute path"),
    ({"sglang_server_start": "maybe"}, "sglang_server_start is 'maybe'; expected auto, true or false"),
    # The argument spec, as the deploy's main entry point checks it:
    ({"sglang_server_port": "port"}, "sglang_server_port"),
    ({"sglang_server_extra_flags": ["port", 1]}, "sglang_server_extra_flags"),
    ({"sglang_server_wait_ready": "maybe"}, "sglang_server_wait_ready"),
]


@pytest.fixture(scope="module")
def bad_settings(tmp_path_factory):
    """Every case of BAD in one run of validate.yml: each an inventory host of its own, its settings
    host variables (typed, as -e JSON gives them), each with its own folder for the unit to review."""
    tmp = tmp_path_factory.mktemp("bad-settings")
    package = unpack_flag_sources("0.5.12", tmp / "tree")
    cases, folders = {}, {}
    for index, (extra, _) in enumerate(BAD):
        folders[f"case{index:02d}"] = tmp / f"review-{index:02d}"
        folders[f"case{index:02d}"].mkdir()
        cases[f"case{index:02d}"] = {**extra, "sglang_server_unit_out": str(folders[f"case{index:02d}"] / "sglang.service"),
                                     "sglang_server_api_key": SECRET}
    before = {name: tree_digest(folder) for name, folder in folders.items()}
    tree_before = tree_digest(package.parent)
    runs = run_cases(tmp / "runner", "validate.yml", cases, ["-e", f"sglang_package_dir={package}",
                                                             "-e", "sglang_server_model_check=false", "-v", "--diff"])
    assert tree_digest(package.parent) == tree_before
    return {name: (run, before[name], tree_digest(folders[name])) for name, run in runs.items()}


@pytest.mark.parametrize(("index", "message"), [(i, message) for i, (_, message) in enumerate(BAD)],
                         ids=[json.dumps(e)[:60] for e, _ in BAD])
def test_bad_settings_refused_before_anything_is_written(bad_settings, index, message):
    run, before, after = bad_settings[f"case{index:02d}"]
    assert run.status == "failed"
    assert message in " ".join(run.failures), run.failures
    assert after == before
    assert SECRET not in run.stdout


def test_a_package_dir_is_taken_literally(tmp_path):
    """`$HOME` and `~` in sglang_package_dir are parts of the name, not variables to expand."""
    package = unpack_flag_sources("0.5.23", tmp_path / "cost $HOME ~ dir")
    missing = tmp_path / "no $HOME here" / "sglang"
    before = tree_digest(package.parent)
    runs = []
    for given in (package, missing):
        private = tmp_path / f"runner-{len(runs)}"
        private.mkdir()
        runs.append(run_playbook(private, "validate.yml", ["-e", json.dumps({"sglang_package_dir": str(given)})]))
    assert runs[0].status == "successful", runs[0].failures
    assert runs[1].status == "failed"
    message = " ".join(runs[1].failures)
    assert f"{missing} is not a directory" in message and os.environ["HOME"] + " here" not in message, message
    assert tree_digest(package.parent) == before


def test_argument_spec_failure_names_it(tmp_path):
    run = validate(tmp_path, "0.5.12", "-e", json.dumps({"sglang_server_port": "port"}))
    assert run.status == "failed"
    assert "Validating arguments against arg spec 'validate'" in run.stdout
    assert "argument 'sglang_server_port' is of type str and we were unable to convert to int" in " ".join(
        run.failures), run.failures


# --------------------------------------------------------------------------
# One check: the deploy and playbooks/validate.yml run the same files
# --------------------------------------------------------------------------


def test_validate_playbook_runs_the_deploy_checks():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    assert specs["validate"]["options"] == specs["main"]["options"]
    play = yaml.safe_load((REPO / "playbooks" / "validate.yml").read_text())
    (task,) = play[0]["tasks"]
    assert task["ansible.builtin.include_role"] == {"name": "sglang_server", "tasks_from": "validate"}
    # validate.yml runs the deploy's own converging call, with state checked (nothing written).
    validate = yaml.safe_load((ROLE / "tasks" / "validate.yml").read_text())
    assert validate[0]["ansible.builtin.import_tasks"] == "server.yml"
    assert validate[0]["vars"] == {"sglang_server_want": "checked"}
    main = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    first = next(i for i, task in enumerate(main) if task.get("ansible.builtin.import_tasks") == "server.yml")
    # Before it only checks: the SM check, and a multi-node replica's nodes, each checked (state
    # checked) before any of them changes. The converging call itself reads the answer-check fallback.
    assert [next(k for k in task if k.startswith("ansible.builtin.")) for task in main[:first]] == [
        "ansible.builtin.assert", "ansible.builtin.include_tasks"]
    assert main[first - 1]["ansible.builtin.include_tasks"] == "nodes_checked.yml"
    nodes = yaml.safe_load((ROLE / "tasks" / "nodes_checked.yml").read_text())
    assert [task["vars"]["sglang_server_want"] for task in nodes if "vars" in task] == ["checked"]
    assert nodes[0]["ansible.builtin.import_tasks"] == "server.yml"
    assert main[first]["vars"] == {"sglang_server_want": "deployed",
                                   "sglang_server_autotune_required": "{{ sglang_server_check_autotune }}"}


def test_later_tasks_read_the_effective_values_only():
    """The wait, the proof and the unit read sglang_server_validated.effective; the variables only feed it."""
    for path in sorted((ROLE / "tasks").glob("*.yml")) + sorted((ROLE / "templates").glob("*.j2")):
        text = path.read_text()
        if path.name == "server.yml":  # the one call the variables feed
            continue
        assert not re.search(r"sglang_server_(port|host|tp_size|model_path|flags)\b", text), path
        assert "sglang_server_autotune_expected" not in text, path
        # no re-deriving from -e autotune: the variable, piped or printed, is not read here
        assert not re.search(r"(?<![\w.])autotune\s*(\||}}|\)|is\b|==)", text), path
    prove = (ROLE / "tasks" / "prove.yml").read_text()
    # the ranks of this node: tp-size on one node, tp-size / nnodes on each node of a multi-node replica
    assert "sglang_server_validated.effective.ready_url" in prove and "sglang_server_validated.effective.local_tp_size" in prove
    # The proof expects what the autotune role published, less an answer-check fallback that turned it off:
    # the flag check's decision (tests/test_sglang_start_tuning.py), read from its result.
    assert ("sglang_autotune_evidence(sglang_server_validated.effective.local_tp_size, "
            "sglang_server_validated.tuning.tuned)") in prove
    # The autotune role's result reaches the server role once: the converging call's autotune option.
    readers = [path.relative_to(ROLE) for path in sorted(ROLE.rglob("*.yml")) + sorted(ROLE.rglob("*.j2"))
               if re.search(r"sglang_autotune_result(?!\.server_args\b|\.enabled\b)", path.read_text())]
    assert [str(path) for path in readers] == ["tasks/server.yml"], readers


@pytest.mark.parametrize("extra", [
    {"sglang_server_extra_flags": {"api-key\u00a0": SECRET}},
    {"sglang_server_extra_flags": {"--port": 70000}},
    {"sglang_server_unit_name": "sglang.service"},
])
def test_check_mode_refuses_the_same(tmp_path, extra):
    real = validate(tmp_path / "real", "0.5.12", "-e", json.dumps(extra), "-v")
    check = validate(tmp_path / "check", "0.5.12", "-e", json.dumps(extra), "-v", "--check", "--diff")
    assert real.status == check.status == "failed"
    assert real.failures == check.failures and real.failures
    assert SECRET not in real.stdout + check.stdout


@pytest.mark.parametrize("check", [False, True])
def test_unit_out_in_a_read_only_folder_fails_in_check_mode_too(tmp_path, check):
    from fs_faults import readonly_mount
    review = tmp_path / "review"
    review.mkdir()
    out = review / "sglang.service"
    with readonly_mount(review):
        before = tree_digest(review)
        run = validate(tmp_path, "0.5.23", "-e", json.dumps({"sglang_server_unit_out": str(out)}),
                       *(["--check"] if check else []))
        assert tree_digest(review) == before
    assert run.status == "failed" and run.changed == 0
    assert (f"sglang_server_unit_out={json.dumps(str(out))} cannot be written on the controller: its folder "
            f"{review} is not writable (read-only or its permissions). Nothing was written.") in " ".join(run.failures)
