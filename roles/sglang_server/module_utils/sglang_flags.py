"""Static checker of SGLang's server command-line flags.

Why: the service role writes ``sglang serve``/``launch_server`` flags into a
systemd unit. A flag that the installed SGLang does not define (a typo, a flag
renamed between releases such as ``--nsa-prefill-backend`` ->
``--dsa-prefill-backend``, a backend that is not a valid choice) only shows up
when the unit starts and the server exits, after a multi-minute model load on
eight GPUs. This module reads the installed release's own flag definitions and
rejects a profile before the unit is written.

How: it never imports SGLang (that pulls in torch and CUDA); it parses the
source with :mod:`ast` and rebuilds what :mod:`argparse` would be given, for the
three ways SGLang has declared its flags:

* up to 0.5.13: ``parser.add_argument("--flag", ...)`` calls in
  ``ServerArgs.add_cli_args`` (``srt/server_args.py``);
* 0.5.14 to 0.5.18: ``ServerArgs`` dataclass fields annotated
  ``A[type, "help"]`` or ``A[type, Arg(...)]``, turned into arguments by
  ``add_cli_args_from_dataclass`` (``srt/arg_groups/arg_utils.py``), plus a
  few hand-written ``add_argument`` calls (mostly deprecated spellings);
* 0.5.23: the same fields split over namespace classes in
  ``srt/arg_groups/fields/*.py`` (collected through ``collect_input_fields``),
  choice lists in ``srt/arg_groups/choices.py``.

Choice lists are resolved statically (literals, module constants, imported
constants, class attributes, ``+`` of lists, ``list()``/``set()``/``sorted()``).
Choices computed at run time (parser registries, comprehensions, plugin
``add_*_choices`` hooks) cannot be known: such a flag accepts any value here.
Argparse prefix abbreviations (``--tp`` for ``--tp-size``) are deliberately not
accepted: only full spellings are, and the canonical one is emitted.

Standard library only, so it runs as Ansible module_utils on the target.
"""

from __future__ import annotations

import ast
import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

try:
    from ansible.module_utils.sglang_locate import package_dir_problem, sglang_version
except ImportError:  # pytest imports this file outside Ansible
    from sglang_locate import package_dir_problem, sglang_version

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

# Deprecated switches whose replacement is several valued flags, used only
# once a release no longer accepts the switch. While it is accepted it is kept
# as given (with a note), because the replacement is not equivalent: through
# 0.5.23, --disable-cuda-graph also sets ServerArgs.disable_cuda_graph, which
# code outside the CUDA graph config still reads (EAGLE worker, gemma4, expert
# pack loader); --cuda-graph-backend-{decode,prefill}=disabled does not set it.
DEPRECATED_SWITCHES: dict[str, dict[str, str]] = {
    "disable-cuda-graph": {
        "cuda-graph-backend-decode": "disabled",
        "cuda-graph-backend-prefill": "disabled",
    },
}

SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "append_const", "count",
                  "help", "version"}
MUTATORS = {"append", "extend", "add", "update", "insert"}
DEPRECATED_HELP_RE = re.compile(r"^\W*deprecated\b", re.I)
USE_INSTEAD_RE = re.compile(r"\buse\s+'?(--[a-z0-9][a-z0-9-]*(?:=[^\s')]+)?)", re.I)
MAX_DEPTH = 12
HINT = ("Point package_dir at the sglang package directory "
        "(<venv>/lib/python3.X/site-packages/sglang), or python at the SGLang "
        "virtualenv's interpreter.")


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
    run time). ``nargs`` is argparse's nargs for flags that take values
    (None: exactly one). ``replacement`` is SGLang's own pointer for deprecated
    flags, verbatim (e.g. ``--dsa-prefill-backend``). ``required``: SGLang's
    parser refuses to start without it (``required=True``, or a dataclass field
    without a default).
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


class FlagTable(dict):
    """dict[str, FlagSpec] that also knows which SGLang it was read from.

    A plain dict subclass (not a dataclass: a dataclass without fields would
    make every two tables compare equal); equality is the dict's.
    """

    def __init__(self, *args: Any, version: str = "unknown", package_dir: str = "",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.version = version
        self.package_dir = package_dir


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


# --------------------------------------------------------------------------
# Locating the package and its version
# --------------------------------------------------------------------------


def _check_package_dir(package_dir: Path) -> Path:
    problem = package_dir_problem(package_dir, ("__init__.py", "srt/server_args.py"))
    if problem:
        raise FlagError(f"{problem} {HINT}")
    return package_dir / "srt" / "server_args.py"


# --------------------------------------------------------------------------
# Static evaluation of the expressions SGLang uses for choices, names, help
# --------------------------------------------------------------------------


class _Unknown:
    """A value that cannot be known without running SGLang."""

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN = _Unknown()


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    assigns: dict[str, list[ast.stmt]] = field(default_factory=dict)
    imports: dict[str, tuple[str, Optional[str]]] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


def _scope_bindings(body: Iterable[ast.stmt]) -> tuple[dict[str, list[ast.stmt]], list[ast.Call]]:
    """Assignments to plain names and mutating method calls in one scope
    (descending into if/for/with/try, not into nested functions or classes)."""
    assigns: dict[str, list[ast.stmt]] = {}
    mutations: list[ast.Call] = []
    stack = list(body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigns.setdefault(target.id, []).append(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            assigns.setdefault(node.target.id, []).append(node)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            assigns.setdefault(node.target.id, []).append(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name)):
            mutations.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return assigns, mutations


class _Source:
    """Parsed modules of one installed sglang package, loaded on demand."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self.modules: dict[str, Optional[_Module]] = {}

    def module(self, name: str) -> Optional[_Module]:
        if name in self.modules:
            return self.modules[name]
        mod: Optional[_Module] = None
        if name == "sglang" or name.startswith("sglang."):
            # package_dir is the "sglang" package whatever its folder is called
            base = self.package_dir.joinpath(*name.split(".")[1:])
            for path in ((base / "__init__.py",) if base == self.package_dir
                         else (base.with_suffix(".py"), base / "__init__.py")):
                if path.is_file():
                    mod = self._parse(name, path)
                    break
        self.modules[name] = mod
        return mod

    def _parse(self, name: str, path: Path) -> _Module:
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text, filename=str(path))
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            raise FlagError(f"cannot parse {path}: {exc}. Reinstall SGLang. {HINT}") from exc
        mod = _Module(name=name, path=path, tree=tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                mod.classes[node.name] = node
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    source = ".".join(parts + ([node.module] if node.module else []))
                for alias in node.names:
                    mod.imports[alias.asname or alias.name] = (source, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        mod.imports[alias.asname] = (alias.name, None)
        mod.assigns, _ = _scope_bindings(
            n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        )
        return mod

    # -- evaluation ---------------------------------------------------------

    def value(self, node: Optional[ast.AST], mod: _Module, scope: Optional["_Scope"] = None,
              depth: int = 0) -> Any:
        if node is None or depth > MAX_DEPTH:
            return UNKNOWN
        d = depth + 1
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list[Any] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    inner = self.value(elt.value, mod, scope, d)
                    if not isinstance(inner, (list, tuple)):
                        return UNKNOWN
                    out.extend(inner)
                    continue
                item = self.value(elt, mod, scope, d)
                if item is UNKNOWN:
                    return UNKNOWN
                out.append(item)
            return tuple(out) if isinstance(node, ast.Tuple) else out
        if isinstance(node, ast.Dict):
            keys = [self.value(k, mod, scope, d) for k in node.keys]
            if any(k is UNKNOWN or k is None for k in keys):
                return UNKNOWN
            return {k: None for k in keys}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.value(node.left, mod, scope, d)
            right = self.value(node.right, mod, scope, d)
            if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                return list(left) + list(right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            return UNKNOWN
        if isinstance(node, ast.Call):
            return self._call(node, mod, scope, d)
        if isinstance(node, ast.Name):
            return self._name(node.id, mod, scope, d)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, mod, scope, d)
        return UNKNOWN

    def _call(self, node: ast.Call, mod: _Module, scope: Optional["_Scope"], depth: int) -> Any:
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "keys" and not node.args):
            inner = self.value(func.value, mod, scope, depth)
            return list(inner) if isinstance(inner, dict) else UNKNOWN
        if isinstance(func, ast.Name) and func.id in ("list", "tuple", "set", "frozenset",
                                                      "sorted") and len(node.args) == 1:
            inner = self.value(node.args[0], mod, scope, depth)
            if not isinstance(inner, (list, tuple, dict)):
                return UNKNOWN
            items = list(inner)
            if func.id == "sorted":
                try:
                    items = sorted(items)
                except TypeError:
                    return UNKNOWN
            if func.id in ("set", "frozenset"):
                items = list(dict.fromkeys(items))
            return items
        return UNKNOWN

    def _name(self, name: str, mod: _Module, scope: Optional["_Scope"], depth: int) -> Any:
        if scope is not None and name in scope.assigns:
            return scope.resolve(name, self, mod, depth)
        if name in mod.assigns:
            return self._assigned(mod.assigns[name], name, mod, depth)
        if name in mod.imports:
            source, attr = mod.imports[name]
            if attr is None:
                return UNKNOWN
            other = self.module(source)
            if other is not None and (attr in other.assigns or attr in other.imports
                                      or attr in other.classes):
                return self._name(attr, other, None, depth + 1)
            submodule = self.module(f"{source}.{attr}")  # from package import module
            return submodule if submodule is not None else UNKNOWN
        if name in mod.classes:
            return (mod, mod.classes[name])
        return UNKNOWN

    def _assigned(self, statements: list[ast.stmt], name: str, mod: _Module, depth: int,
                  scope: Optional["_Scope"] = None) -> Any:
        """The value of a name bound (once, or once plus += of constants) in a scope."""
        plain = [s for s in statements if not isinstance(s, ast.AugAssign)]
        if len(plain) != 1:
            return UNKNOWN
        value = self.value(plain[0].value, mod, scope, depth)
        for stmt in statements:
            if isinstance(stmt, ast.AugAssign):
                extra = self.value(stmt.value, mod, scope, depth)
                if not (isinstance(stmt.op, ast.Add) and isinstance(value, list)
                        and isinstance(extra, (list, tuple))):
                    return UNKNOWN
                value = value + list(extra)
        return value

    def _attribute(self, node: ast.Attribute, mod: _Module, scope: Optional["_Scope"],
                   depth: int) -> Any:
        owner = self.value(node.value, mod, scope, depth)
        if isinstance(owner, _Module):
            return self._name(node.attr, owner, None, depth)
        if isinstance(owner, tuple) and len(owner) == 2 and isinstance(owner[1], ast.ClassDef):
            owner_mod, cls = owner
            class_scope = _Scope(cls.body)
            if node.attr in class_scope.assigns:
                return class_scope.resolve(node.attr, self, owner_mod, depth)
        return UNKNOWN

    def text(self, node: Optional[ast.AST], mod: _Module) -> str:
        """Help or message text; the literal parts of an f-string."""
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value for v in node.values
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
        value = self.value(node, mod)
        return value if isinstance(value, str) else ""


class _Scope:
    """Names bound in one function or class body."""

    def __init__(self, body: Iterable[ast.stmt]) -> None:
        self.assigns, self.mutations = _scope_bindings(body)

    def resolve(self, name: str, source: _Source, mod: _Module, depth: int) -> Any:
        value = source._assigned(self.assigns[name], name, mod, depth + 1, self)
        # In-scope mutations (e.g. choices.add("x") under an if): the value may
        # be any of them, so accept the union; unknown arguments make it unknown.
        for call in self.mutations:
            if call.func.value.id != name:  # type: ignore[union-attr]
                continue
            if not isinstance(value, list):
                return UNKNOWN
            args = [source.value(a, mod, self, depth + 1) for a in call.args]
            if any(a is UNKNOWN for a in args):
                return UNKNOWN
            if call.func.attr in ("append", "add"):  # type: ignore[union-attr]
                value = value + args[:1]
            elif call.func.attr == "insert" and len(args) == 2:  # type: ignore[union-attr]
                value = value + [args[1]]
            elif all(isinstance(a, (list, tuple, dict)) for a in args):
                value = value + [x for a in args for x in a]
            else:
                return UNKNOWN
        return value


# --------------------------------------------------------------------------
# Building FlagSpecs
# --------------------------------------------------------------------------


def _dotted(node: Optional[ast.AST]) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _choices(raw: Any) -> Optional[list[str]]:
    if isinstance(raw, dict):
        raw = list(raw)
    if not isinstance(raw, (list, tuple)) or any(isinstance(v, _Unknown) for v in raw):
        return None
    return [str(v) for v in dict.fromkeys(raw)]


class _Extractor:
    def __init__(self, package_dir: Path) -> None:
        self.source = _Source(package_dir)
        self.flags: dict[str, FlagSpec] = {}
        self.field_names: set[str] = set()
        self.scope: Optional[_Scope] = None  # add_cli_args' own local names

    # -- argparse actions -----------------------------------------------------

    def _action_class(self, node: ast.AST, mod: _Module) -> Optional[tuple[_Module, ast.ClassDef]]:
        if isinstance(node, ast.Name):
            found = self.source._name(node.id, mod, None, 0)
            if isinstance(found, tuple) and isinstance(found[1], ast.ClassDef):
                return found
        return None

    @staticmethod
    def _action_stores(cls: ast.ClassDef) -> bool:
        """Whether a custom argparse.Action's __call__ stores anything."""
        call = next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                     and f.name == "__call__"), None)
        if call is None:
            return True  # inherited: assume it stores
        return any(isinstance(n, ast.Call) and _dotted(n.func) == "setattr"
                   for n in ast.walk(call))

    @staticmethod
    def _init_default(cls: ast.ClassDef, param: str) -> Any:
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                args = item.args
                positional = args.posonlyargs + args.args
                for arg, default in zip(positional[len(positional) - len(args.defaults):],
                                        args.defaults):
                    if arg.arg == param:
                        return default.value if isinstance(default, ast.Constant) else UNKNOWN
                for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                    if arg.arg == param and default is not None:
                        return default.value if isinstance(default, ast.Constant) else UNKNOWN
        return None

    # -- one argparse argument -----------------------------------------------

    def add(self, names: list[str], kwargs: dict[str, ast.AST], mod: _Module, lineno: int,
            *, choices_override: Any = None, nargs_override: Any = None,
            type_name: Optional[str] = None, force_switch: Optional[bool] = None,
            help_text: Optional[str] = None, scope: Optional[_Scope] = None,
            required: Optional[bool] = None) -> Optional[FlagSpec]:
        src = self.source
        options = [n for n in names if n.startswith("--")]
        if not options:
            return None
        bare = [o[2:] for o in options]
        dest_value = src.value(kwargs.get("dest"), mod) if "dest" in kwargs else None
        dest = dest_value if isinstance(dest_value, str) else bare[0].replace("-", "_")
        canonical = next((b for b in bare if b.replace("-", "_") in self.field_names),
                         next((b for b in bare if b.replace("-", "_") == dest), bare[0]))
        aliases = [b for b in bare if b != canonical]

        action_node = kwargs.get("action")
        action_name = ""
        nargs: Any = src.value(kwargs["nargs"], mod) if "nargs" in kwargs else None
        if nargs_override is not None:
            nargs = nargs_override
        is_switch = False
        boolean_optional = False
        deprecated = False
        removed = None
        ignored = False
        if action_node is not None:
            action = src.value(action_node, mod)
            if isinstance(action, str):
                action_name = action
                is_switch = action in SWITCH_ACTIONS
            else:
                action_name = _dotted(action_node)
                if action_name.endswith("BooleanOptionalAction"):
                    is_switch = boolean_optional = True
                else:
                    found = self._action_class(action_node, mod)
                    if "nargs" not in kwargs and found is not None:
                        default = self._init_default(found[1], "nargs")
                        nargs = None if default is UNKNOWN else default
                    is_switch = nargs == 0
                    ignored = found is not None and not self._action_stores(found[1])
            deprecated = "Deprecated" in action_name
            if "error_message" in kwargs:
                removed = src.text(kwargs["error_message"], mod) or "this flag is rejected"
        if force_switch is not None:
            is_switch = force_switch
        if is_switch:
            nargs = None

        help_text = help_text if help_text is not None else src.text(kwargs.get("help"), mod)
        replacement = None
        if "new_flag" in kwargs:
            value = src.value(kwargs["new_flag"], mod)
            replacement = value if isinstance(value, str) else None
        if not deprecated and DEPRECATED_HELP_RE.search(help_text or ""):
            deprecated = True
        if deprecated and replacement is None:
            match = USE_INSTEAD_RE.search(help_text or "")
            replacement = match.group(1) if match else None

        choices_node = kwargs.get("choices")
        raw_choices = choices_override if choices_override is not None else (
            src.value(choices_node, mod, scope) if choices_node is not None else None)
        choices = None if raw_choices is None else _choices(raw_choices)
        if type_name is None:
            type_name = _dotted(kwargs.get("type")) or "str"
        if required is None:
            required = src.value(kwargs.get("required"), mod, scope) is True
        rel = "sglang/" + mod.path.relative_to(src.package_dir).as_posix()
        spec = FlagSpec(
            name=canonical, aliases=aliases, choices=choices, is_switch=is_switch,
            deprecated=deprecated, replacement=replacement, nargs=nargs,
            value_type=type_name, dest=dest, removed=removed, ignored=ignored,
            choices_expr=None if choices_node is None else ast.unparse(choices_node)[:200],
            source=f"{rel}:{lineno}", required=required and not is_switch,
        )
        self.flags[canonical] = spec
        if boolean_optional:
            negated = [f"no-{b}" for b in bare]
            self.flags[negated[0]] = FlagSpec(
                name=negated[0], aliases=negated[1:], is_switch=True, deprecated=deprecated,
                dest=dest, negates=canonical, source=spec.source,
            )
        return spec

    # -- styles ---------------------------------------------------------------

    def add_argument_call(self, call: ast.Call, mod: _Module) -> None:
        names = [self.source.value(a, mod, self.scope) for a in call.args]
        if not all(isinstance(n, str) for n in names):
            return
        kwargs = {k.arg: k.value for k in call.keywords if k.arg}
        self.add(names, kwargs, mod, call.lineno, scope=self.scope)

    def dataclass_fields(self, cls: ast.ClassDef, mod: _Module,
                         only: Optional[list[str]] = None) -> None:
        for field_mod, stmt in self._fields_of(cls, mod):
            name = stmt.target.id  # type: ignore[union-attr]
            if only is not None and name not in only:
                continue
            self._dataclass_field(name, stmt, field_mod)

    def _fields_of(self, cls: ast.ClassDef, mod: _Module) -> list[tuple[_Module, ast.AnnAssign]]:
        out: list[tuple[_Module, ast.AnnAssign]] = []
        if cls.name == "ServerArgs":
            # 0.5.23: ServerArgs.__annotations__ = {**collect_input_fields(NS), **own}
            for node in ast.walk(mod.tree):
                if (isinstance(node, ast.Call) and _dotted(node.func).endswith(
                        "collect_input_fields") and node.args):
                    namespaces = self.source.value(node.args[0], mod)
                    if not isinstance(namespaces, list):
                        raise FlagError(
                            f"cannot read the namespace classes of ServerArgs in {mod.path} "
                            f"({ast.unparse(node.args[0])}); this SGLang layout is not "
                            "supported by the flag checker.")
                    for ns in namespaces:
                        if isinstance(ns, tuple) and isinstance(ns[1], ast.ClassDef):
                            out.extend(self._fields_of(ns[1], ns[0]))
        for base in cls.bases:
            found = self.source.value(base, mod)
            if isinstance(found, tuple) and isinstance(found[1], ast.ClassDef):
                out.extend(self._fields_of(found[1], found[0]))
        out.extend((mod, s) for s in cls.body
                   if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
        return out

    def _dataclass_field(self, name: str, stmt: ast.AnnAssign, mod: _Module) -> None:
        """Mirror sglang.srt.arg_groups.arg_utils.add_cli_args_from_dataclass."""
        src = self.source
        ann = stmt.annotation
        if not (isinstance(ann, ast.Subscript) and _dotted(ann.value).split(".")[-1]
                in ("A", "Annotated") and isinstance(ann.slice, ast.Tuple)):
            return
        raw_type, *extras = ann.slice.elts
        meta: Optional[dict[str, ast.AST]] = None
        help_text = ""
        for extra in extras:
            if isinstance(extra, ast.Call) and _dotted(extra.func).split(".")[-1] == "Arg":
                meta = {k.arg: k.value for k in extra.keywords if k.arg}
                help_text = src.text(meta.get("help"), mod)
                break
            if isinstance(extra, (ast.Constant, ast.JoinedStr)) and (
                    isinstance(extra, ast.JoinedStr) or isinstance(extra.value, str)):
                meta = {}
                help_text = src.text(extra, mod)
                break
        if meta is None:
            return
        if src.value(meta.get("no_cli"), mod) is True:
            return
        cli_name = src.value(meta["cli_name"], mod) if "cli_name" in meta else None
        if not isinstance(cli_name, str):
            cli_name = "--" + name.replace("_", "-")
        aliases = src.value(meta["aliases"], mod) if "aliases" in meta else []
        if not isinstance(aliases, (list, tuple)):
            aliases = []
        names = [cli_name, *[a for a in aliases if isinstance(a, str)]]
        kwargs: dict[str, ast.AST] = {"help": ast.Constant(help_text)}
        auto_dest = cli_name.lstrip("-").replace("-", "_")
        if auto_dest != name:
            kwargs["dest"] = ast.Constant(name)
        line = stmt.lineno

        if "action" in meta:
            kwargs["action"] = meta["action"]
            action_kwargs = meta.get("action_kwargs")
            if isinstance(action_kwargs, ast.Dict):
                for k, v in zip(action_kwargs.keys, action_kwargs.values):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        kwargs[k.value] = v
            self.add(names, kwargs, mod, line, help_text=help_text)
            return

        inner = self._unwrap_optional(raw_type)
        arg_choices = src.value(meta["choices"], mod) if "choices" in meta else None
        has_parser = "type_parser" in meta and not (
            isinstance(meta["type_parser"], ast.Constant) and meta["type_parser"].value is None)
        parser_name = _dotted(meta.get("type_parser")) if has_parser else None
        nargs = src.value(meta["nargs"], mod) if "nargs" in meta else None
        if "choices" in meta:
            kwargs["choices"] = meta["choices"]
        head = _dotted(inner.value).split(".")[-1] if isinstance(inner, ast.Subscript) else ""

        if head == "Literal":
            elts = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
            literal = [src.value(e, mod) for e in elts]
            choices = arg_choices if arg_choices else literal
            value_type = parser_name or ("int" if literal and isinstance(literal[0], int)
                                         and not isinstance(literal[0], bool) else
                                         "float" if literal and isinstance(literal[0], float)
                                         else "str")
            spec = self.add(names, kwargs, mod, line,
                            choices_override=choices if choices else UNKNOWN,
                            type_name=value_type, help_text=help_text)
            if spec is not None and "choices" not in meta:
                spec.choices_expr = ast.unparse(inner)[:200]
            return
        if head in ("list", "List") and not has_parser:
            elem = inner.slice if not isinstance(inner.slice, ast.Tuple) else inner.slice.elts[0]
            self.add(names, kwargs, mod, line, nargs_override=nargs or "+",
                     type_name=self._scalar_type(elem), help_text=help_text)
            return
        if _dotted(inner) == "bool":
            self.add(names, kwargs, mod, line, force_switch=True, help_text=help_text)
            return
        # Only scalar fields become required: Arg(required=True), or no default.
        required = src.value(meta.get("required"), mod) if "required" in meta else None
        if required is None or isinstance(required, _Unknown):
            required = not self._has_default(stmt)
        self.add(names, kwargs, mod, line, nargs_override=nargs, force_switch=False,
                 type_name=parser_name or self._scalar_type(inner), help_text=help_text,
                 required=required is True)

    @staticmethod
    def _has_default(stmt: ast.AnnAssign) -> bool:
        """Whether a field has a default (a value, or field(default=/default_factory=))."""
        value = stmt.value
        if value is None:
            return False
        if isinstance(value, ast.Call) and _dotted(value.func).split(".")[-1] == "field":
            return any(k.arg in ("default", "default_factory") for k in value.keywords)
        return True

    @staticmethod
    def _scalar_type(node: ast.AST) -> str:
        name = _dotted(node)
        return name if name in ("int", "float") else "str"

    @staticmethod
    def _unwrap_optional(node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return node
        if isinstance(node, ast.Subscript) and _dotted(node.value).split(".")[-1] == "Optional":
            return node.slice
        parts: list[ast.AST] = []
        if isinstance(node, ast.Subscript) and _dotted(node.value).split(".")[-1] == "Union" \
                and isinstance(node.slice, ast.Tuple):
            parts = list(node.slice.elts)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            stack: list[ast.AST] = [node]
            while stack:
                item = stack.pop()
                if isinstance(item, ast.BinOp) and isinstance(item.op, ast.BitOr):
                    stack.extend([item.right, item.left])
                else:
                    parts.append(item)
        if parts:
            non_none = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)
                        and _dotted(p) != "None"]
            if len(non_none) == 1:
                return non_none[0]
        return node

    # -- driver -----------------------------------------------------------------

    def run(self, server_args: Path) -> dict[str, FlagSpec]:
        mod = self.source.module("sglang.srt.server_args")
        if mod is None:  # pragma: no cover - checked by _check_package_dir
            raise FlagError(f"cannot read {server_args}. {HINT}")
        cls = mod.classes.get("ServerArgs")
        method = None
        if cls is not None:
            method = next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                           and f.name == "add_cli_args"), None)
        if cls is None or method is None:
            raise FlagError(
                f"{server_args} has no ServerArgs.add_cli_args: this SGLang layout is not "
                f"supported by the flag checker (version {sglang_version(self.source.package_dir)}).")
        self.field_names = {s.target.id for _, s in self._fields_of(cls, mod)
                            if isinstance(s.target, ast.Name)}
        self.scope = _Scope(method.body)
        for node in self._calls_in_order(method.body):
            func = _dotted(node.func)
            if func.endswith(".add_argument"):
                self.add_argument_call(node, mod)
            elif func.split(".")[-1] == "add_cli_args_from_dataclass" and len(node.args) >= 2:
                # The class statement, not a later rebinding of the name (0.5.23
                # rebinds ServerArgs to a msgspec.defstruct of the same fields).
                arg = node.args[1]
                target = ((mod, mod.classes[arg.id]) if isinstance(arg, ast.Name)
                          and arg.id in mod.classes else self.source.value(arg, mod))
                if not (isinstance(target, tuple) and isinstance(target[1], ast.ClassDef)):
                    raise FlagError(f"cannot find the dataclass {ast.unparse(node.args[1])} "
                                    f"passed to add_cli_args_from_dataclass in {server_args}.")
                only = None
                for kw in node.keywords:
                    if kw.arg == "fields":
                        value = self.source.value(kw.value, mod, self.scope)
                        only = list(value) if isinstance(value, (list, tuple)) else None
                self.dataclass_fields(target[1], target[0], only)
        for required in ("model-path", "port"):
            if required not in self.flags:
                raise FlagError(
                    f"found {len(self.flags)} flags in {server_args} but not --{required}: this "
                    "SGLang layout is not understood by the flag checker; refusing to guess.")
        return self.flags

    @staticmethod
    def _calls_in_order(body: list[ast.stmt]) -> list[ast.Call]:
        calls: list[ast.Call] = []

        def visit(node: ast.AST) -> None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                 ast.Lambda)):
                return
            if isinstance(node, ast.Call):
                calls.append(node)
            for child in ast.iter_child_nodes(node):
                visit(child)

        for stmt in body:
            visit(stmt)
        return calls


def extract_flags(package_dir: str | Path) -> FlagTable:
    """Every flag the installed SGLang's server parser defines, by canonical name.

    The result is a dict[str, FlagSpec] with .version and .package_dir.
    Raises FlagError when package_dir is not an SGLang package or its layout is
    not one this checker understands.
    """
    package_dir = Path(package_dir)
    server_args = _check_package_dir(package_dir)
    extractor = _Extractor(package_dir)
    flags = extractor.run(server_args)
    return FlagTable(flags, version=sglang_version(package_dir), package_dir=str(package_dir))


# --------------------------------------------------------------------------
# Resolving a profile
# --------------------------------------------------------------------------


def _index(flags: dict[str, FlagSpec]) -> dict[str, FlagSpec]:
    return {spelling: spec for spec in flags.values() for spelling in spec.spellings}


def _usable(spec: Optional[FlagSpec]) -> bool:
    return spec is not None and not spec.deprecated and spec.removed is None


def _translation(name: str, spec: Optional[FlagSpec],
                 index: dict[str, FlagSpec]) -> Optional[FlagSpec]:
    """The flag to emit instead of `name`, for renames whose meaning is the same:
    FLAG_RENAMES, or a deprecated alias that stores into the same dest as the
    flag SGLang itself names as its replacement."""
    if _usable(spec):
        return None
    candidates: list[FlagSpec] = []
    target = FLAG_RENAMES.get(name)
    if target and target in index:
        candidates.append(index[target])
    if spec is not None and spec.replacement and re.fullmatch(r"--[a-z0-9-]+", spec.replacement):
        new = index.get(spec.replacement[2:])
        if new is not None and new.dest == spec.dest and new.is_switch == spec.is_switch:
            candidates.append(new)
    candidates = [c for c in candidates if c.removed is None and c is not spec]
    best = next((c for c in candidates if _usable(c)), None)
    if best is None and spec is None and candidates:
        best = candidates[0]  # the old name is gone; a deprecated new one still beats failing
    return best


def _fmt_choices(choices: list[str]) -> str:
    return ", ".join(choices)


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
                        f"{_fmt_choices(spec.choices)}")
    return problems, text


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
    index = _index(flags)
    argv: list[str] = []
    notes: list[str] = []
    problems: list[str] = []
    emitted: dict[str, str] = {}
    all_names = sorted(index)

    for raw_name, value in profile.items():
        name = str(raw_name)
        if name.startswith("-"):
            name = name.lstrip("-")
        if value is None or value is False:
            continue
        spec = index.get(name)
        new = _translation(name, spec, index)
        if new is not None:
            if spec is not None:
                notes.append(f"--{name} is a deprecated alias of --{new.name} in SGLang "
                             f"{version}; using --{new.name}")
            else:
                notes.append(f"--{name} is spelled --{new.name} in SGLang {version}")
            spec = new
        elif spec is None and name in DEPRECATED_SWITCHES and value is True and all(
                _usable(index.get(k)) and v in (index[k].choices or [v])
                for k, v in DEPRECATED_SWITCHES[name].items()):
            pairs = DEPRECATED_SWITCHES[name]
            for target, target_value in pairs.items():
                if target in emitted:
                    problems.append(f"--{target} is given twice (as --{emitted[target]} and "
                                    f"--{name})")
                    continue
                emitted[target] = name
                argv += [f"--{target}", target_value]
            spelled = " ".join(f"--{k} {v}" for k, v in pairs.items())
            notes.append(f"--{name} is not accepted by SGLang {version}; using its replacement "
                         f"{spelled}")
            continue
        elif spec is None:
            close = difflib.get_close_matches(name, all_names, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join('--' + c for c in close)}?" if close else ""
            prefixed = [n for n in all_names if n.startswith(name)]
            if prefixed and not close:
                hint = (f"; argparse would take it as an abbreviation of "
                        f"{', '.join('--' + c for c in prefixed[:3])}"
                        f"{' (ambiguous)' if len(prefixed) > 1 else ''}, but the profile must "
                        "spell flags in full")
            problems.append(f"--{name} is not a flag of SGLang {version}{hint}")
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

        flag = spec.name
        if value is True:
            if spec.is_switch or spec.optional_value:
                argv.append(f"--{flag}")
            else:
                what = f" (one of: {_fmt_choices(spec.choices)})" if spec.choices else ""
                problems.append(f"--{flag} needs a value{what}; the profile gives it as a bare "
                                "switch (true)")
            continue
        if spec.is_switch:
            hint = ""
            if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
                hint = " (a string: pass a YAML boolean, not a quoted one)"
            problems.append(f"--{flag} is a switch and takes no value, got {value!r}{hint}; "
                            "use true to pass it, false to leave it out")
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if isinstance(value, (list, tuple)) and not spec.multiple:
            problems.append(f"--{flag} takes one value, got a list of {len(values)}: {value!r}")
            continue
        if isinstance(spec.nargs, int) and spec.nargs > 1 and len(values) != spec.nargs:
            problems.append(f"--{flag} takes exactly {spec.nargs} values, got {len(values)}")
            continue
        if spec.nargs == "+" and not values:
            problems.append(f"--{flag} needs at least one value, got an empty list")
            continue
        texts: list[str] = []
        bad = False
        for item in values:
            found, text = _check_value(flag, spec, item)
            problems.extend(found)
            bad = bad or bool(found)
            if text is not None:
                texts.append(text)
        if bad:
            continue
        if spec.choices is None and spec.choices_expr:
            notes.append(f"--{flag}: its choices ({spec.choices_expr}) are computed at run time; "
                         "the value was not checked")
        if len(texts) == 1 and texts[0].startswith("-") and not _is_number(texts[0]):
            argv.append(f"--{flag}={texts[0]}")
        else:
            argv += [f"--{flag}", *texts]

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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
