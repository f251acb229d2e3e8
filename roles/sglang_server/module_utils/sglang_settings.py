"""Every server setting checked once, whichever way it comes in.

A fact such as the port can arrive as its own variable (sglang_server_port)
or as a flag in sglang_server_profile, the autotune role's
sglang_autotune_result.server_args or sglang_server_extra_flags. Flag names are
normalised here once (``--tp-size`` means ``tp-size``; whitespace, Unicode
spaces, control characters, upper case and ``_`` are refused by name; what
follows a separator inside a key is never shown, see :func:`split_key`), the
three sources are merged in that order, and each fact gets the same check on
every way in. The readiness wait, the journal proof and the unit read the
result of :func:`effective`, never a second variable.

Messages name the variable and the key; they never repeat the value of a
secret. The sglang_server module calls it before it checks the flags.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from ansible.module_utils import sglang_multinode
from ansible.module_utils.flag_key import NAME_CHARS_RE, split_key
from ansible.module_utils.service_account import name_problem
from ansible.module_utils.systemd_unit_name import unit_name_problem
from ansible.module_utils.systemd_text import UnitError, control_problems, env_lines, program_problem

FLAG_SOURCES = ("sglang_server_profile", "sglang_autotune_result.server_args", "sglang_server_extra_flags")
# Every server flag of SGLang 0.5.6 to 0.5.23 is spelled so (checked against the wheels).
FLAG_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
# What a flag key may hold before it is cut (upper case and '_' are refused by name); anything
# else separates a name from what may be its value, which is never shown (split_key).
# Flags that carry a secret: they belong in the 0600 file, through sglang_server_api_key.
SECRET_FLAG_RE = re.compile(r"(^|-)(api-key|key|token|secret|password|passwd)($|-)")
SECRET_ENV_RE = re.compile(r"(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)($|_)", re.I)
SECRET_HINT = ("set the key through sglang_server_api_key (Ansible Vault): it goes only to a "
               "0600 file and never onto the command line, into the unit or the play output")
# Variables the role sets itself: sglang_server_environment must not set them too.
OWN_ENV = {"HF_TOKEN": "sglang_server_hf_token", "SGLANG_SERVER_API_KEY": "sglang_server_api_key"}
HF_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
# RFC 3986 path (and query) characters; '%' only as a %XX escape.
URL_PATH_RE = re.compile(r"/(?:[A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})*"
                         r"(?:\?(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?")
# sglang_server_start: auto (where NVIDIA device nodes exist), or a boolean in one of these spellings.
START_TRUE = ("true", "yes", "1", "on")
START_VALUES = ("auto", *START_TRUE, "false", "no", "0", "off")


class SettingsError(ValueError):
    """The settings cannot make a unit; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# --------------------------------------------------------------------------
# Flag names and the merge
# --------------------------------------------------------------------------


def _describe(char: str) -> str:
    return f"U+{ord(char):04X} ({unicodedata.name(char, 'unnamed').lower()})"


def _hint(shown: str) -> str:
    clean = shown.lower().replace("_", "-").lstrip("-")
    return f"; did you mean {clean!r}?" if clean and FLAG_NAME_RE.fullmatch(clean) else ""


def flag_name(source: str, key: Any) -> tuple[Optional[str], Optional[str]]:
    """(the flag name without dashes, None), or (None, why the key is refused)."""
    if not isinstance(key, str):
        return None, (f"{source} has the key {key!r} ({type(key).__name__}); flag names are "
                      "strings such as 'tp-size'")
    shown, hidden = split_key(key)
    if hidden:  # only what comes before the separator is shown or suggested
        separator = shown[-1]
        if separator == "=":
            return None, (f"{source} key {shown + '...'!r} is not a flag name: it has '=' "
                          "(what follows it is not shown). Give the value as the key's value, "
                          "e.g. {'tp-size': 8}; secrets go through sglang_server_api_key")
        return None, (f"{source} key {shown + '...'!r} is not a flag name: it has {_describe(separator)} at "
                      f"position {len(shown) - 1} (what follows it is not shown). Flag names are ASCII lower-case "
                      "letters, digits and '-', optionally after '--'; give a value as the key's value, e.g. "
                      f"{{'tp-size': 8}}; secrets go through sglang_server_api_key{_hint(shown[:-1])}")
    name = key[2:] if key.startswith("--") else key
    if FLAG_NAME_RE.fullmatch(name):
        return name, None
    bad = next((i for i, c in enumerate(name) if not re.fullmatch(r"[a-z0-9-]", c)), 0)
    char = name[bad] if name else ""
    if not name:
        why = "it is empty"
    elif char.isspace() or unicodedata.category(char) in ("Zs", "Zl", "Zp", "Cc", "Cf"):
        why = f"it has {_describe(char)} at position {bad + (len(key) - len(name))}"
    elif char == "-":
        why = "it starts with '-' (write 'tp-size' or '--tp-size')"
    elif char == "_":
        why = "it has '_' where SGLang's flags have '-'"
    elif char.isupper():
        why = "it has upper-case letters (SGLang's flags are lower case)"
    else:
        why = f"it has {_describe(char)}"
    clean = "".join(c for c in name if NAME_CHARS_RE.fullmatch(c))  # a separator ends the key here
    return None, (f"{source} key {key!r} is not a flag name: {why}. Flag names are ASCII "
                  f"lower-case letters, digits and '-', optionally after '--'{_hint(clean)}")


@dataclass
class Merged:
    """The profile, the autotune flags and the overrides, merged in that order."""

    flags: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)  # name -> the source that set it last
    problems: list[str] = field(default_factory=list)


def merge_flags(sources: Sequence[tuple[str, Any]]) -> Merged:
    """Normalise each source's names, then merge: a later source overrides an earlier one."""
    merged = Merged()
    for source, flags in sources:
        if flags is None:
            continue
        if not isinstance(flags, Mapping):
            merged.problems.append(f"{source} must be a mapping of flag name -> value, got a "
                                   f"{type(flags).__name__}")
            continue
        seen: dict[str, str] = {}
        for key, value in flags.items():
            name, problem = flag_name(source, key)
            if problem:
                merged.problems.append(problem)
                continue
            if name in seen:
                merged.problems.append(f"{source} gives --{name} twice (as {seen[name]!r} and "
                                       f"{key!r}); keep one")
                continue
            seen[name] = key
            merged.problems += control_problems({f"{source}[{key!r}]": value})
            merged.flags[name] = value
            merged.origin[name] = source
    return merged


# --------------------------------------------------------------------------
# One check per fact, used for the variable and for the flag alike
# --------------------------------------------------------------------------


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
        return int(value)
    return None


def port_problem(label: str, value: Any) -> Optional[str]:
    number = _int(value)
    if number is not None and 1 <= number <= 65535:
        return None
    return f"{label} must be a port number 1-65535, got {value!r}"


def tp_size_problem(label: str, value: Any) -> Optional[str]:
    number = _int(value)
    if number is not None and number >= 1:
        return None
    return f"{label} must be an integer >= 1, got {value!r}"


def host_ok(host: str) -> bool:
    """One address or DNS name: no spaces, no scheme, no port, no list."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    return bool(re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                             r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?", host))


def host_problem(label: str, value: Any) -> Optional[str]:
    if isinstance(value, str) and host_ok(value):
        return None
    return (f"{label} must be one IP address or host name, got {value!r} "
            "(e.g. 127.0.0.1, 0.0.0.0, ::1)")


def model_path_problem(label: str, value: Any) -> Optional[str]:
    if isinstance(value, str) and value == value.strip() and (
            value.startswith("/") or HF_REPO_RE.fullmatch(value) and ".." not in value):
        return None
    return (f"{label} must be a model directory (an absolute path) or a Hugging Face repo id "
            f"such as zai-org/GLM-5, got {value!r}")


# flag -> (its own variable, the check both get)
FACTS: dict[str, tuple[str, Callable[[str, Any], Optional[str]]]] = {
    "model-path": ("sglang_server_model_path", model_path_problem),
    "tp-size": ("sglang_server_tp_size", tp_size_problem),
    "host": ("sglang_server_host", host_problem),
    "port": ("sglang_server_port", port_problem),
}
# SGLang's other spellings of those flags (0.5.6 to 0.5.23): one spelling per fact.
FACT_ALIASES = {"tensor-parallel-size": "tp-size", "model": "model-path"}


def fact_problems(settings: Mapping[str, Any], merged: Merged) -> list[str]:
    """The facts the role reads back (listen address, TP size, model) in the merged flags."""
    problems = []
    for name, (variable, check) in FACTS.items():
        value = merged.flags.get(name)
        origin = merged.origin.get(name)
        if value is None or value is False:
            where = f"{origin} sets it to {value!r}" if origin else "no flag source sets it"
            problems.append(f"--{name} cannot be left out ({where}): the unit, the readiness "
                            f"wait and the autotune proof need it; set {variable} instead")
            continue
        if origin == FLAG_SOURCES[0] and variable in settings and value == settings[variable]:
            continue  # the profile's own "{{ variable }}": checked once, as the variable
        problem = check(f"{origin}[{name!r}]", value)
        if problem:
            problems.append(problem)
    for alias, name in FACT_ALIASES.items():
        if merged.flags.get(alias) not in (None, False):
            problems.append(f"{merged.origin[alias]}[{alias!r}] is another spelling of --{name}; "
                            f"give it as {name!r} or set {FACTS[name][0]}")
    return problems


def secret_flag_problems(merged: Merged) -> list[str]:
    problems = []
    for name, value in merged.flags.items():
        if value is None or value is False:
            continue
        if SECRET_FLAG_RE.search(name):
            problems.append(f"{merged.origin[name]}[{name!r}] carries a secret that would land on "
                            f"the command line, in the unit and in the play output: {SECRET_HINT}")
        elif name == "config":
            problems.append(f"{merged.origin[name]}[{name!r}]: --config would read options from a "
                            "file none of the role's checks see; give them in "
                            "sglang_server_extra_flags (the role passes its own --config for the "
                            "API key)")
    return problems


def api_key_problems(key: Any) -> list[str]:
    """What the key may hold to reach SGLang unchanged (YAML file or environment file)."""
    if not isinstance(key, str) or not key:
        return [] if key in ("", None) else ["sglang_server_api_key must be a string"]
    problems = []
    bad = next((i for i, c in enumerate(key) if not c.isprintable()), None)
    if bad is not None and not re.match(r"[\x00-\x1f\x7f]", key[bad]):  # control: said already
        problems.append(f"sglang_server_api_key contains {_describe(key[bad])} at position {bad}, "
                        "which SGLang's YAML config reader would not pass on unchanged; use "
                        "printable characters")
    if key.startswith("-"):
        problems.append("sglang_server_api_key starts with '-': SGLang's argument parser would "
                        "take it for a flag; use a key that does not")
    return problems


# --------------------------------------------------------------------------
# Everything, once
# --------------------------------------------------------------------------


def ready_path_problem(value: Any) -> Optional[str]:
    if isinstance(value, str) and URL_PATH_RE.fullmatch(value):
        return None
    return (f"sglang_server_ready_path must be a URL path starting with '/' (no spaces, no "
            f"'#', '%' only as %XX), e.g. /health_generate or /ready, got {value!r}")


def _variable_problems(settings: Mapping[str, Any]) -> list[str]:
    problems: list[Optional[str]] = []
    for name, (variable, check) in FACTS.items():
        if variable in settings:
            problems.append(check(variable, settings[variable]))
    for name in ("sglang_server_user", "sglang_server_group"):
        if settings.get(name) is not None:
            problems.append(name_problem(name, settings[name]))
    if "sglang_server_unit_name" in settings:
        problems.append(unit_name_problem(settings["sglang_server_unit_name"]))
    if "sglang_server_python" in settings:
        problems.append(program_problem(settings["sglang_server_python"], "sglang_server_python"))
    if "sglang_server_ready_path" in settings:
        problems.append(ready_path_problem(settings["sglang_server_ready_path"]))
    timeout = settings.get("sglang_server_ready_timeout")
    if timeout is not None and (_int(timeout) or 0) < 1:
        problems.append(f"sglang_server_ready_timeout must be a number of seconds >= 1, got "
                        f"{timeout!r}")
    start = settings.get("sglang_server_start")
    if start is not None and str(start).lower() not in START_VALUES:
        problems.append(f"sglang_server_start is {start!r}; expected auto, true or false")
    if "sglang_server_environment" in settings:
        try:
            env_lines(settings["sglang_server_environment"])
        except UnitError as exc:
            problems += exc.problems
        problems += own_env_problems(settings["sglang_server_environment"], settings)
    problems += api_key_problems(settings.get("sglang_server_api_key"))
    return [p for p in problems if p]


def own_env_problems(environment: Any, settings: Mapping[str, Any]) -> list[str]:
    """sglang_server_environment setting a variable the role sets from its own setting."""
    if not isinstance(environment, Mapping):
        return []
    return [f"sglang_server_environment sets {name}; set {variable} instead (one variable per setting; "
            "keep it in Ansible Vault)"
            for name, variable in OWN_ENV.items() if name in environment and variable in settings]


def server_problems(settings: Mapping[str, Any]) -> list[str]:
    """Every problem with the server's settings, before anything is rendered or changed.

    ``settings`` maps variable names to values: the ones above by name, the
    three flag sources (FLAG_SOURCES) raw. Control characters are refused in
    every value, naming the variable.
    """
    plain = {k: v for k, v in settings.items() if k not in FLAG_SOURCES}
    problems = control_problems(plain) + _variable_problems(settings)
    merged = Merged()
    if any(source in settings for source in FLAG_SOURCES):
        merged = merge_flags([(s, settings.get(s)) for s in FLAG_SOURCES])
        problems += merged.problems
        if not merged.problems:
            problems += fact_problems(settings, merged) + secret_flag_problems(merged)
    if not merged.problems:
        problems += sglang_multinode.problems(settings, merged.flags, merged.origin)
    return list(dict.fromkeys(problems))


def url_host(host: str) -> str:
    """Where a local client reaches a server listening on ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def effective(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The merged flags and the facts read from them: what the unit, the wait and the proof use."""
    problems = server_problems(settings)
    if problems:
        raise SettingsError(problems)
    flags = merge_flags([(s, settings.get(s)) for s in FLAG_SOURCES]).flags
    flags.update(sglang_multinode.node_flags(settings))
    host, port = str(flags["host"]), int(flags["port"])
    nnodes = int(flags.get("nnodes", 1))
    return {
        "flags": flags,
        "host": host,
        "port": port,
        "tp_size": int(flags["tp-size"]),
        # Ranks on this node: what its journal shows (tp-size alone on one node).
        "local_tp_size": int(flags["tp-size"]) * int(flags.get("pp-size", 1)) // nnodes,
        "nnodes": nnodes,
        "node_rank": int(flags.get("node-rank", 0)),
        "model_path": flags["model-path"],
        "ready_url": f"http://{url_host(host)}:{port}{settings.get('sglang_server_ready_path')}",
        # What the role adds to the user's sglang_server_environment (NCCL, Gloo, CUDA order;
        # it wins): no secret, so it can be a fact. The user's own variables, which may be
        # secrets, go straight to the unit module.
        "environment": sglang_multinode.nccl_environment(settings),
    }


def server_command(argv: list[str], env_flags: list[list[str]], config_flag: str,
                   api_key_set: bool, unit_name: str) -> dict[str, Any]:
    """How the API key reaches SGLang: a 0600 YAML file read with --config where the installed
    release has it, else systemd's ${SGLANG_SERVER_API_KEY} from the environment file."""
    if not api_key_set or not env_flags:
        return {"argv": list(argv), "env_flags": [], "api_key_file": "", "api_key_name": "",
                "api_key_way": "none"}
    if config_flag:
        path = f"/etc/sglang/{unit_name}.secrets.yaml"
        return {"argv": [*argv, config_flag, path], "env_flags": [], "api_key_file": path,
                "api_key_name": env_flags[0][0].lstrip("-"), "api_key_way": "config"}
    return {"argv": list(argv), "env_flags": env_flags, "api_key_file": "", "api_key_name": "",
            "api_key_way": "environment"}


def secret_env_names(environment: Any) -> list[str]:
    """Names in sglang_server_environment that look like secrets (their task hides its output)."""
    if not isinstance(environment, Mapping):
        return []
    return [str(k) for k in environment if SECRET_ENV_RE.search(str(k))]

