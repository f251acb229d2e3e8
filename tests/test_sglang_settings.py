"""sglang_server's settings: every fact checked once, on every way in (issue 17, items 2 and 3).

A fact (port, host, TP size, model path, API key) can come as its own
variable or as a flag in the profile, the autotune role's flags or the
user's extra flags. Each family below is tried through each way in; the
message is asserted, and a secret's value never appears in it.
"""

from __future__ import annotations


import pytest

from ansible.module_utils import sglang_settings as ss
from ansible.module_utils.systemd_unit_name import UNIT_SUFFIXES

SECRET = "sk-hostile-0123456789"
PROFILE = {"model-path": "/models/GLM-5-NVFP4", "served-model-name": "glm-5", "tp-size": 8,
           "quantization": "modelopt_fp4", "disable-radix-cache": True,
           "host": "127.0.0.1", "port": 30000}
GOOD = {
    "sglang_server_profile": PROFILE, "sglang_autotune_result.server_args": {},
    "sglang_server_extra_flags": {},
    "sglang_server_model_path": "/models/GLM-5-NVFP4", "sglang_server_tp_size": 8,
    "sglang_server_host": "127.0.0.1", "sglang_server_port": 30000,
    "sglang_server_user": "sglang", "sglang_server_group": "sglang", "sglang_server_unit_name": "sglang",
    "sglang_server_python": "/opt/sglang/current/bin/python", "sglang_server_ready_path": "/health_generate",
    "sglang_server_ready_timeout": 5400, "sglang_server_start": "auto",
    "sglang_server_environment": {"NCCL_IB_DISABLE": "1"}, "sglang_server_hf_token": "",
    "sglang_server_api_key": SECRET,
}


def problems(**change) -> list[str]:
    found = ss.server_problems({**GOOD, **change})
    assert not any(SECRET in p for p in found), found
    return found


def extra(flags: dict) -> list[str]:
    return problems(sglang_server_extra_flags=flags)


def test_good_settings_pass():
    assert ss.server_problems(GOOD) == []


# --------------------------------------------------------------------------
# Flag names: normalised once, refused by name
# --------------------------------------------------------------------------

# (key, why, the key as the message shows it, the name it suggests): a separator (any character outside [A-Za-z0-9_-])
# with something after it cuts the key there, as what follows may be a value.
BAD_NAMES = [
    ("api-key ", "U+0020 (space) at position 7", "api-key ", "api-key"),
    ("api-key\u00a0", "U+00A0 (no-break space) at position 7", "api-key\u00a0", "api-key"),
    (" api-key", "U+0020 (space) at position 0", " ...", ""),
    ("api-key\t", "U+0009 (unnamed) at position 7", "api-key\t", "api-key"),
    ("api\u200b-key", "U+200B (zero width space) at position 3", "api\u200b...", "api"),
    ("api-key\u3000", "U+3000 (ideographic space) at position 7", "api-key\u3000", "api-key"),
    ("--api-key\u00a0", "U+00A0 (no-break space) at position 9", "--api-key\u00a0", "api-key"),
    ("API-KEY", "upper-case letters", "API-KEY", "api-key"),
    ("api_key", "'_' where SGLang's flags have '-'", "api_key", "api-key"),
    ("-api-key", "starts with '-'", "-api-key", "api-key"),
    ("---api-key", "starts with '-'", "---api-key", "api-key"),
    ("", "it is empty", "", ""),
    ("ápi-key", "U+00E1 (latin small letter a with acute) at position 0", "á...", ""),
]


@pytest.mark.parametrize(("name", "why", "shown", "hint"), BAD_NAMES)
@pytest.mark.parametrize("source", ss.FLAG_SOURCES)
def test_flag_names_refused_by_name_on_every_way_in(source, name, why, shown, hint):
    flags = {**(PROFILE if source == "sglang_server_profile" else {}), name: SECRET}
    found = problems(**{source: flags})
    assert len(found) == 1, found
    assert found[0].startswith(f"{source} key {shown!r} is not a flag name: "), found
    assert why in found[0], found
    if hint:  # made of what is shown only
        assert found[0].endswith(f"did you mean {hint!r}?")
    else:
        assert "did you mean" not in found[0]


def test_name_that_is_not_a_string():
    assert extra({8: "x"}) == ["sglang_server_extra_flags has the key 8 (int); flag names are "
                               "strings such as 'tp-size'"]


@pytest.mark.parametrize("key", ["--tp-size", "tp-size"])
def test_dashed_key_means_the_same(key):
    effective = ss.effective({**GOOD, "sglang_server_extra_flags": {key: 4}})
    assert effective["flags"]["tp-size"] == 4 and "--tp-size" not in effective["flags"]
    assert effective["tp_size"] == 4
    assert list(effective["flags"]).index("tp-size") == list(PROFILE).index("tp-size")  # overrides in place


def test_one_name_twice_in_one_source():
    assert extra({"tp-size": 2, "--tp-size": 4}) == [
        "sglang_server_extra_flags gives --tp-size twice (as 'tp-size' and '--tp-size'); keep one"]


def test_flags_not_a_mapping():
    assert extra(["port", 1]) == ["sglang_server_extra_flags must be a mapping of flag name -> "
                                  "value, got a list"]


# --------------------------------------------------------------------------
# One check per fact, the variable and the flag alike
# --------------------------------------------------------------------------

FACT_CASES = [
    ("port", "sglang_server_port", 70000, "must be a port number 1-65535, got 70000"),
    ("port", "sglang_server_port", 0, "must be a port number 1-65535, got 0"),
    ("port", "sglang_server_port", -1, "must be a port number 1-65535, got -1"),
    ("port", "sglang_server_port", "http", "must be a port number 1-65535, got 'http'"),
    ("port", "sglang_server_port", "30000 ", "must be a port number 1-65535, got '30000 '"),
    ("port", "sglang_server_port", 3.5, "must be a port number 1-65535, got 3.5"),
    ("tp-size", "sglang_server_tp_size", 0, "must be an integer >= 1, got 0"),
    ("tp-size", "sglang_server_tp_size", -8, "must be an integer >= 1, got -8"),
    ("tp-size", "sglang_server_tp_size", "eight", "must be an integer >= 1, got 'eight'"),
    ("host", "sglang_server_host", "a b,c", "must be one IP address or host name, got 'a b,c'"),
    ("host", "sglang_server_host", "10.0.0.1,10.0.0.2", "must be one IP address or host name"),
    ("host", "sglang_server_host", "http://x", "must be one IP address or host name"),
    ("host", "sglang_server_host", "", "must be one IP address or host name, got ''"),
    ("host", "sglang_server_host", "0.0.0.0 ::", "must be one IP address or host name"),
    ("model-path", "sglang_server_model_path", "", "must be a model directory (an absolute path)"),
    ("model-path", "sglang_server_model_path", " /models/x", "got ' /models/x'"),
    ("model-path", "sglang_server_model_path", "./models/x", "got './models/x'"),
    ("model-path", "sglang_server_model_path", "a/b/c", "or a Hugging Face repo id"),
    ("model-path", "sglang_server_model_path", "org/../x", "got 'org/../x'"),
]


@pytest.mark.parametrize(("flag", "variable", "value", "message"), FACT_CASES)
def test_fact_checked_as_its_variable(flag, variable, value, message):
    # the profile's "{{ variable }}": said once, as the variable
    (found,) = problems(**{variable: value, "sglang_server_profile": {**PROFILE, flag: value}})
    assert found.startswith(f"{variable} must be ") and message in found, found


@pytest.mark.parametrize(("flag", "variable", "value", "message"), FACT_CASES)
@pytest.mark.parametrize("key", ["{}", "--{}"])
def test_fact_checked_as_an_extra_flag(flag, variable, value, message, key):
    (found,) = extra({key.format(flag): value})
    assert found.startswith(f"sglang_server_extra_flags[{flag!r}] must be ") and message in found, found


@pytest.mark.parametrize(("flag", "variable", "value", "message"), FACT_CASES[:3])
def test_fact_checked_in_a_profile_of_its_own(flag, variable, value, message):
    (found,) = problems(sglang_server_profile={**PROFILE, flag: value})
    assert found.startswith(f"sglang_server_profile[{flag!r}] must be ") and message in found, found


@pytest.mark.parametrize(("flag", "variable"), [(f, v) for f, (v, _) in ss.FACTS.items()])
@pytest.mark.parametrize("dropped", [None, False])
def test_facts_cannot_be_dropped(flag, variable, dropped):
    assert extra({flag: dropped}) == [
        f"--{flag} cannot be left out (sglang_server_extra_flags sets it to {dropped!r}): the unit, "
        f"the readiness wait and the autotune proof need it; set {variable} instead"]


def test_fact_missing_from_every_source():
    profile = {k: v for k, v in PROFILE.items() if k != "port"}
    assert problems(sglang_server_profile=profile) == [
        "--port cannot be left out (no flag source sets it): the unit, the readiness wait and the "
        "autotune proof need it; set sglang_server_port instead"]


@pytest.mark.parametrize(("alias", "flag"), list(ss.FACT_ALIASES.items()))
def test_other_spellings_of_a_fact_refused(alias, flag):
    found = extra({alias: "4"})
    assert found == [f"sglang_server_extra_flags[{alias!r}] is another spelling of --{flag}; give "
                     f"it as {flag!r} or set {ss.FACTS[flag][0]}"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "::1", "fe80::1", "gpu-node.example.org", "localhost"])
def test_single_hosts_accepted(host):
    assert ss.host_ok(host)
    assert extra({"host": host}) == []


# --------------------------------------------------------------------------
# Secrets: never on the command line, never in a message
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["api-key", "--api-key", "admin-api-key", "ssl-keyfile-password",
                                  "hf-token", "client-secret"])
@pytest.mark.parametrize("source", ss.FLAG_SOURCES)
def test_secret_flags_refused_on_every_way_in(source, name):
    flags = {**(PROFILE if source == "sglang_server_profile" else {}), name: SECRET}
    found = problems(**{source: flags})
    bare = name.lstrip("-")
    assert found == [f"{source}[{bare!r}] carries a secret that would land on the command line, "
                     f"in the unit and in the play output: {ss.SECRET_HINT}"]


def test_dropping_a_secret_flag_is_fine():
    assert extra({"api-key": None, "admin-api-key": False}) == []


def test_config_flag_refused():
    found = extra({"config": "/etc/my.yaml"})
    assert found == ["sglang_server_extra_flags['config']: --config would read options from a file "
                     "none of the role's checks see; give them in sglang_server_extra_flags (the role "
                     "passes its own --config for the API key)"]


@pytest.mark.parametrize(("key", "message"), [
    (f"sk\u00a0{SECRET}", "sglang_server_api_key contains U+00A0 (no-break space) at position 2"),
    (f"{SECRET}\u2028", "sglang_server_api_key contains U+2028 (line separator)"),
    (f"{SECRET}\x85", "sglang_server_api_key contains U+0085 (unnamed)"),
    (f"-{SECRET}", "sglang_server_api_key starts with '-'"),
    (f"{SECRET}\n", "sglang_server_api_key contains the control character '\\n'"),
    (f"{SECRET}\t", "sglang_server_api_key contains the control character '\\t'"),
])
def test_api_key_refusals_never_show_the_key(key, message):
    found = ss.server_problems({**GOOD, "sglang_server_api_key": key})
    assert len(found) == 1 and message in found[0], found
    assert SECRET not in found[0]


def test_control_characters_in_flag_values_named():
    assert extra({"served-model-name": "glm\n5"})[0].startswith(
        "sglang_server_extra_flags['served-model-name'] contains the control character '\\n'")


# --------------------------------------------------------------------------
# The other settings the deploy checks (playbooks/validate.yml runs the same)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sglang@x", "sglang@", "-sglang", ".sglang", "",
                                  "sgl ang", "a/b", "sglang\\x2d", "x" * 248, 7])
def test_unit_names_systemd_would_refuse(name):
    found = problems(sglang_server_unit_name=name)
    assert len(found) == 1 and found[0].startswith(
        "sglang_server_unit_name must be a unit name systemd accepts, without '.service'"), found
    assert found[0].endswith(f"got {name!r}")


@pytest.mark.parametrize("suffix", UNIT_SUFFIXES)
def test_unit_names_ending_in_a_unit_type_are_refused(suffix):
    found = problems(sglang_server_unit_name=f"sglang{suffix}")
    assert found == [
        "sglang_server_unit_name must be a unit name systemd accepts, without '.service' or another unit "
        f"type's suffix: 'sglang{suffix}' ends in '{suffix}', so systemctl would address that {suffix[1:]} "
        f"unit, not the service ({', '.join(UNIT_SUFFIXES)} are unit types). Give the name without it, "
        "e.g. 'sglang'; the role adds '.service'"]


@pytest.mark.parametrize("source", ss.FLAG_SOURCES)
@pytest.mark.parametrize("key", ["api-key=sk-LEAK7", "--token=sk-LEAK7", "tp-size=8"])
def test_a_refused_name_with_a_value_never_shows_the_value(source, key):
    flags = {**(PROFILE if source == "sglang_server_profile" else {}), key: True}
    found = problems(**{source: flags})
    name = key.split("=", 1)[0]
    assert found == [f"{source} key {name + '=...'!r} is not a flag name: it has '=' (what follows it is "
                     "not shown). Give the value as the key's value, e.g. {'tp-size': 8}; secrets go "
                     "through sglang_server_api_key"]
    assert "LEAK7" not in " ".join(found)


@pytest.mark.parametrize("source", ss.FLAG_SOURCES)
@pytest.mark.parametrize(("key", "shown", "separator", "hint"), [
    ("api-key sk-LEAK7", "api-key ...", "U+0020 (space) at position 7", "api-key"),
    ("api-key\tsk-LEAK7", "api-key\t...", "U+0009 (unnamed) at position 7", "api-key"),
    ("api-key:sk-LEAK7", "api-key:...", "U+003A (colon) at position 7", "api-key"),
    ("api-key  sk-LEAK7", "api-key ...", "U+0020 (space) at position 7", "api-key"),
    ("--token\u00a0sk-LEAK7", "--token\u00a0...", "U+00A0 (no-break space) at position 7", "token"),
    ("API_KEY/sk-LEAK7", "API_KEY/...", "U+002F (solidus) at position 7", "api-key"),
    (":sk-LEAK7", ":...", "U+003A (colon) at position 0", ""),
])
def test_a_refused_name_with_any_separator_never_shows_what_follows(source, key, shown, separator, hint):
    flags = {**(PROFILE if source == "sglang_server_profile" else {}), key: True}
    found = problems(**{source: flags})
    assert found == [f"{source} key {shown!r} is not a flag name: it has {separator} (what follows it is not "
                     "shown). Flag names are ASCII lower-case letters, digits and '-', optionally after '--'; "
                     "give a value as the key's value, e.g. {'tp-size': 8}; secrets go through "
                     f"sglang_server_api_key{f'; did you mean {hint!r}?' if hint else ''}"]
    assert "leak7" not in found[0].lower()  # neither as given nor lower-cased into a suggestion


@pytest.mark.parametrize(("name", "variable"), [("HF_TOKEN", "sglang_server_hf_token"),
                                                ("SGLANG_SERVER_API_KEY", "sglang_server_api_key")])
def test_the_environment_cannot_set_what_a_setting_sets(name, variable):
    found = ss.server_problems({**GOOD, variable: "", "sglang_server_environment": {name: "hf_dup"}})
    assert found == [f"sglang_server_environment sets {name}; set {variable} instead (one variable per "
                     "setting; keep it in Ansible Vault)"]
    assert "hf_dup" not in found[0]


@pytest.mark.parametrize("environment", ["A=1", ["A=1"], 7])
def test_an_environment_that_is_not_a_mapping_is_named(environment):
    found = ss.server_problems({**GOOD, "sglang_server_environment": environment})
    assert found == ["sglang_server_environment must be a mapping of variable name -> value (e.g. "
                     f"{{HF_HOME: /data/hf}}), got a {type(environment).__name__}"]


@pytest.mark.parametrize("name", ["sglang", "sglang-2", "glm_5:a", "x" * 247, "sglang.v2"])
def test_unit_names_accepted(name):
    assert problems(sglang_server_unit_name=name) == []


@pytest.mark.parametrize("path", ["health", "/health generate", "/h#x", "/h%zz", "http://x/health", "",
                                  "/h\u00e9", None])
def test_ready_paths_that_are_not_url_paths(path):
    found = problems(sglang_server_ready_path=path)
    assert [p for p in found if p.startswith("sglang_server_ready_path must be a URL path")] == [
        f"sglang_server_ready_path must be a URL path starting with '/' (no spaces, no '#', '%' only "
        f"as %XX), e.g. /health_generate or /ready, got {path!r}"]


@pytest.mark.parametrize("path", ["/health_generate", "/ready", "/health?deep=1", "/a%20b", "/"])
def test_ready_paths_accepted(path):
    assert problems(sglang_server_ready_path=path) == []


@pytest.mark.parametrize("python", ["python", "/opt/my venv/bin/python", "/opt/%h/python", "/opt/$X/python",
                                    "/opt/venv/bin/python/", "/opt/../bin/python", "/opt/./python",
                                    "/opt//python", '/opt/"q"/python', "", None])
def test_exec_start_interpreter_refused(python):
    found = problems(sglang_server_python=python)
    assert found == [f"sglang_server_python must be an absolute path of letters, digits and "
                     f"'._+,:=@-' (no spaces, quotes, '%', '$', '.' or '..' parts, no trailing '/'), "
                     f"got {python!r}"], found


@pytest.mark.parametrize(("change", "message"), [
    ({"sglang_server_environment": {"BAD NAME": "x"}}, "'BAD NAME' is not an environment variable name"),
    ({"sglang_server_environment": {"1X": "x"}}, "'1X' is not an environment variable name"),
    ({"sglang_server_environment": {"X": {"a": 1}}}, "sglang_server_environment['X'] must be a string"),
    ({"sglang_server_environment": {"X": "a\nExecStartPre=/bin/sh"}},
     "sglang_server_environment['X'] contains the control character '\\n'"),
    ({"sglang_server_ready_timeout": 0}, "sglang_server_ready_timeout must be a number of seconds >= 1, got 0"),
    ({"sglang_server_ready_timeout": "soon"}, "got 'soon'"),
    ({"sglang_server_start": "maybe"}, "sglang_server_start is 'maybe'; expected auto, true or false"),
    ({"sglang_server_user": "root user"}, "sglang_server_user must be a plain user or group name"),
    ({"sglang_server_user": "sglang\nExecStartPre=/bin/sh"}, "sglang_server_user contains the control character"),
    ({"sglang_server_hf_token": "hf\x00"}, "sglang_server_hf_token contains the control character '\\x00'"),
])
def test_other_settings_named(change, message):
    found = problems(**change)
    assert any(message in p for p in found), found


# --------------------------------------------------------------------------
# The effective values the unit, the readiness wait and the journal proof read
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "url"), [
    ("0.0.0.0", "http://127.0.0.1:31000/ready"), ("::", "http://[::1]:31000/ready"),
    ("fe80::1", "http://[fe80::1]:31000/ready"), ("gpu.example.org", "http://gpu.example.org:31000/ready"),
])
def test_readiness_url_from_the_extra_flags(host, url):
    effective = ss.effective({**GOOD, "sglang_server_ready_path": "/ready",
                              "sglang_server_extra_flags": {"host": host, "--port": "31000", "tp-size": 2}})
    assert (effective["ready_url"], effective["port"], effective["tp_size"], effective["host"]) == (url, 31000, 2, host)


def test_effective_refuses_what_server_problems_refuses():
    with pytest.raises(ss.SettingsError) as info:
        ss.effective({**GOOD, "sglang_server_extra_flags": {"api-key\u00a0": SECRET}})
    assert "is not a flag name" in str(info.value) and SECRET not in str(info.value)


def test_autotune_flags_merged_between_profile_and_overrides():
    effective = ss.effective({**GOOD, "sglang_autotune_result.server_args": {"disable-flashinfer-autotune": True},
                              "sglang_server_extra_flags": {"disable-radix-cache": False}})
    assert effective["flags"]["disable-flashinfer-autotune"] is True
    assert effective["flags"]["disable-radix-cache"] is False


@pytest.mark.parametrize(("config_flag", "key_set", "way"), [
    ("--config", True, "config"), ("", True, "environment"), ("--config", False, "none"), ("", False, "none")])
def test_how_the_api_key_reaches_the_server(config_flag, key_set, way):
    env_flags = [["--api-key", "SGLANG_SERVER_API_KEY"]] if key_set else []
    command = ss.server_command(["--port", "30000"], env_flags, config_flag, key_set, "glm")
    assert command["api_key_way"] == way
    if way == "config":
        assert command["argv"] == ["--port", "30000", "--config", "/etc/sglang/glm.secrets.yaml"]
        assert command["env_flags"] == [] and command["api_key_name"] == "api-key"
    elif way == "environment":
        assert command["argv"] == ["--port", "30000"] and command["env_flags"] == env_flags
    else:
        assert command["argv"] == ["--port", "30000"] and command["env_flags"] == []


def test_secret_looking_environment_names():
    assert ss.secret_env_names({"WANDB_API_KEY": "x", "HF_TOKEN": "y", "NCCL_IB_DISABLE": "1",
                                "KEYBOARD": "z"}) == ["WANDB_API_KEY", "HF_TOKEN"]
