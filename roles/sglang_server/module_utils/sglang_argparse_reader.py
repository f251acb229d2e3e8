"""The static reader: SGLang's server flags read from its argparse declarations, not imported.

Where SGLang cannot be imported (no torch: the demo, ``--no-deps`` installs,
playbooks/validate.yml on a bare tree, CI), this rebuilds what :mod:`argparse`
would be given, for the three ways releases 0.5.6 to 0.5.23 declare the flags:

* up to 0.5.13: ``parser.add_argument("--flag", ...)`` calls in
  ``ServerArgs.add_cli_args`` (``srt/server_args.py``);
* 0.5.14 to 0.5.18: ``ServerArgs`` dataclass fields annotated
  ``A[type, "help"]`` or ``A[type, Arg(...)]``, turned into arguments by
  ``add_cli_args_from_dataclass`` (``srt/arg_groups/arg_utils.py``), plus a
  few hand-written ``add_argument`` calls (mostly deprecated spellings);
* 0.5.23: the same fields split over namespace classes in
  ``srt/arg_groups/fields/*.py`` (collected through ``collect_input_fields``),
  choice lists in ``srt/arg_groups/choices.py``.

Values come from sglang_source_eval; choices computed at run time cannot be
known, and such a flag accepts any value here. Where SGLang can be imported,
its own parser leads (sglang_parser_probe, sglang_runtime_args).

Standard library only, so it runs as Ansible module_utils on the target.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Optional

from ansible.module_utils.sglang_flag_table import FlagError, FlagSpec, FlagTable
from ansible.module_utils.sglang_locate import package_dir_problem, sglang_version
from ansible.module_utils.sglang_source_eval import (
    HINT,
    UNKNOWN,
    Module,
    Scope,
    Source,
    dotted,
)

SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "append_const", "count",
                  "help", "version"}
DEPRECATED_HELP_RE = re.compile(r"^\W*deprecated\b", re.I)
USE_INSTEAD_RE = re.compile(r"\buse\s+'?(--[a-z0-9][a-z0-9-]*(?:=[^\s')]+)?)", re.I)
# Flags every release has: a table without them is a layout this reader misreads.
ALWAYS_DECLARED = ("model-path", "port")


def _choices(raw: Any) -> Optional[list[str]]:
    if not isinstance(raw, (list, tuple)) or any(v is UNKNOWN for v in raw):
        return None
    return [str(v) for v in dict.fromkeys(raw)]


def _unwrap_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript) and dotted(node.value).split(".")[-1] == "Optional":
        return node.slice
    return node


def _scalar_type(node: ast.AST) -> str:
    name = dotted(node)
    return name if name in ("int", "float") else "str"


class _Reader:
    def __init__(self, package_dir: Path) -> None:
        self.source = Source(package_dir)
        self.flags: dict[str, FlagSpec] = {}
        self.field_names: set[str] = set()
        self.scope: Optional[Scope] = None  # add_cli_args' own local names

    # -- custom argparse actions ------------------------------------------------

    def _action_class(self, node: ast.AST, mod: Module) -> Optional[tuple[Module, ast.ClassDef]]:
        if isinstance(node, ast.Name):
            found = self.source.name(node.id, mod, None, 0)
            if isinstance(found, tuple) and isinstance(found[1], ast.ClassDef):
                return found
        return None

    @staticmethod
    def _action_stores(cls: ast.ClassDef) -> bool:
        """Whether a custom argparse.Action's __call__ stores anything."""
        call = next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                     and f.name == "__call__"), None)
        return call is None or any(isinstance(n, ast.Call) and dotted(n.func) == "setattr"
                                   for n in ast.walk(call))

    @staticmethod
    def _init_default(cls: ast.ClassDef, param: str) -> Any:
        """The default of one of the action's __init__ parameters (None: no such default)."""
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                positional = item.args.posonlyargs + item.args.args
                with_default = positional[len(positional) - len(item.args.defaults):]
                for arg, default in zip(with_default, item.args.defaults):
                    if arg.arg == param:
                        return default.value if isinstance(default, ast.Constant) else UNKNOWN
        return None

    # -- one argparse argument ----------------------------------------------------

    def add(self, names: list[str], kwargs: dict[str, ast.AST], mod: Module, lineno: int,
            *, choices_override: Any = None, nargs_override: Any = None,
            type_name: Optional[str] = None, force_switch: Optional[bool] = None,
            help_text: Optional[str] = None, required: Optional[bool] = None,
            scope: Optional[Scope] = None) -> Optional[FlagSpec]:
        """What ``parser.add_argument(*names, **kwargs)`` declares (scope: the caller's names)."""
        src = self.source
        bare = [n[2:] for n in names if n.startswith("--")]
        if not bare:
            return None
        dest_value = src.value(kwargs.get("dest"), mod) if "dest" in kwargs else None
        dest = dest_value if isinstance(dest_value, str) else bare[0].replace("-", "_")
        canonical = next((b for b in bare if b.replace("-", "_") in self.field_names),
                         next((b for b in bare if b.replace("-", "_") == dest), bare[0]))

        action_node = kwargs.get("action")
        nargs: Any = src.value(kwargs["nargs"], mod) if "nargs" in kwargs else None
        if nargs_override is not None:
            nargs = nargs_override
        is_switch = boolean_optional = deprecated = ignored = False
        removed = None
        if action_node is not None:
            action = src.value(action_node, mod)
            action_name = action if isinstance(action, str) else dotted(action_node)
            if isinstance(action, str):
                is_switch = action in SWITCH_ACTIONS
            elif action_name.endswith("BooleanOptionalAction"):
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
        replacement = src.value(kwargs["new_flag"], mod) if "new_flag" in kwargs else None
        replacement = replacement if isinstance(replacement, str) else None
        deprecated = deprecated or bool(DEPRECATED_HELP_RE.search(help_text))
        if deprecated and replacement is None:
            match = USE_INSTEAD_RE.search(help_text)
            replacement = match.group(1) if match else None

        choices_node = kwargs.get("choices")
        raw_choices = choices_override if choices_override is not None else (
            src.value(choices_node, mod, scope) if choices_node is not None else None)
        if required is None:
            required = src.value(kwargs.get("required"), mod, scope) is True
        rel = "sglang/" + mod.path.relative_to(src.package_dir).as_posix()
        spec = FlagSpec(
            name=canonical, aliases=[b for b in bare if b != canonical],
            choices=None if raw_choices is None else _choices(raw_choices), is_switch=is_switch,
            deprecated=deprecated, replacement=replacement, nargs=nargs,
            value_type=type_name or dotted(kwargs.get("type")) or "str", dest=dest,
            removed=removed, ignored=ignored,
            choices_expr=None if choices_node is None else ast.unparse(choices_node)[:200],
            source=f"{rel}:{lineno}", required=required and not is_switch,
        )
        self.flags[canonical] = spec
        if boolean_optional:
            negated = [f"no-{b}" for b in bare]
            self.flags[negated[0]] = FlagSpec(
                name=negated[0], aliases=negated[1:], is_switch=True, deprecated=deprecated,
                dest=dest, negates=canonical, source=spec.source)
        return spec

    def add_argument_call(self, call: ast.Call, mod: Module) -> None:
        names = [self.source.value(a, mod, self.scope) for a in call.args]
        if all(isinstance(n, str) for n in names):
            self.add(names, {k.arg: k.value for k in call.keywords if k.arg}, mod, call.lineno,
                     scope=self.scope)

    # -- dataclass fields (0.5.14 on) ---------------------------------------------

    def fields_of(self, cls: ast.ClassDef, mod: Module) -> list[tuple[Module, ast.AnnAssign]]:
        """The annotated fields of a class, those of 0.5.23's namespace classes first."""
        out: list[tuple[Module, ast.AnnAssign]] = []
        if cls.name == "ServerArgs":
            # 0.5.23: ServerArgs.__annotations__ = {**collect_input_fields(NS), **own}
            for node in ast.walk(mod.tree):
                if (isinstance(node, ast.Call) and node.args
                        and dotted(node.func).endswith("collect_input_fields")):
                    namespaces = self.source.value(node.args[0], mod)
                    if not isinstance(namespaces, list):
                        raise FlagError(
                            f"cannot read the namespace classes of ServerArgs in {mod.path} "
                            f"({ast.unparse(node.args[0])}); this SGLang layout is not "
                            "supported by the flag checker.")
                    for ns in namespaces:
                        if isinstance(ns, tuple) and isinstance(ns[1], ast.ClassDef):
                            out.extend(self.fields_of(ns[1], ns[0]))
        out.extend((mod, s) for s in cls.body
                   if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
        return out

    def dataclass_field(self, name: str, stmt: ast.AnnAssign, mod: Module) -> None:
        """Mirror sglang.srt.arg_groups.arg_utils.add_cli_args_from_dataclass for one field."""
        src = self.source
        ann = stmt.annotation
        if not (isinstance(ann, ast.Subscript) and isinstance(ann.slice, ast.Tuple)
                and dotted(ann.value).split(".")[-1] in ("A", "Annotated")):
            return
        raw_type, *extras = ann.slice.elts
        meta: Optional[dict[str, ast.AST]] = None
        help_text = ""
        for extra in extras:
            if isinstance(extra, ast.Call) and dotted(extra.func).split(".")[-1] == "Arg":
                meta = {k.arg: k.value for k in extra.keywords if k.arg}
                help_text = src.text(meta.get("help"), mod)
                break
            if isinstance(extra, ast.JoinedStr) or (
                    isinstance(extra, ast.Constant) and isinstance(extra.value, str)):
                meta, help_text = {}, src.text(extra, mod)
                break
        if meta is None or src.value(meta.get("no_cli"), mod) is True:
            return
        cli_name = src.value(meta["cli_name"], mod) if "cli_name" in meta else None
        if not isinstance(cli_name, str):
            cli_name = "--" + name.replace("_", "-")
        aliases = src.value(meta["aliases"], mod) if "aliases" in meta else []
        names = [cli_name, *[a for a in aliases if isinstance(a, str)]] \
            if isinstance(aliases, (list, tuple)) else [cli_name]
        kwargs: dict[str, ast.AST] = {"help": ast.Constant(help_text)}
        if cli_name.lstrip("-").replace("-", "_") != name:
            kwargs["dest"] = ast.Constant(name)
        line = stmt.lineno

        if "action" in meta:
            kwargs["action"] = meta["action"]
            action_kwargs = meta.get("action_kwargs")
            if isinstance(action_kwargs, ast.Dict):
                for key, value in zip(action_kwargs.keys, action_kwargs.values):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        kwargs[key.value] = value
            self.add(names, kwargs, mod, line, help_text=help_text)
            return

        inner = _unwrap_optional(raw_type)
        has_parser = "type_parser" in meta and not (
            isinstance(meta["type_parser"], ast.Constant) and meta["type_parser"].value is None)
        parser_name = dotted(meta.get("type_parser")) if has_parser else None
        nargs = src.value(meta["nargs"], mod) if "nargs" in meta else None
        if "choices" in meta:
            kwargs["choices"] = meta["choices"]
        head = dotted(inner.value).split(".")[-1] if isinstance(inner, ast.Subscript) else ""

        if head == "Literal":
            elts = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]  # type: ignore[attr-defined]
            literal = [src.value(e, mod) for e in elts]
            arg_choices = src.value(meta["choices"], mod) if "choices" in meta else None
            first = literal[0] if literal else None
            value_type = parser_name or ("int" if isinstance(first, int) and not isinstance(first, bool)
                                         else "float" if isinstance(first, float) else "str")
            spec = self.add(names, kwargs, mod, line, choices_override=arg_choices or literal or UNKNOWN,
                            type_name=value_type, help_text=help_text)
            if spec is not None and "choices" not in meta:
                spec.choices_expr = ast.unparse(inner)[:200]
        elif head in ("list", "List") and not has_parser:
            elem = inner.slice.elts[0] if isinstance(inner.slice, ast.Tuple) else inner.slice  # type: ignore[attr-defined]
            self.add(names, kwargs, mod, line, nargs_override=nargs or "+",
                     type_name=_scalar_type(elem), help_text=help_text)
        elif dotted(inner) == "bool":
            self.add(names, kwargs, mod, line, force_switch=True, help_text=help_text)
        else:
            # Only scalar fields become required: Arg(required=True), or no default.
            required = src.value(meta.get("required"), mod) if "required" in meta else None
            if not isinstance(required, bool):
                required = stmt.value is None
            self.add(names, kwargs, mod, line, nargs_override=nargs, force_switch=False,
                     type_name=parser_name or _scalar_type(inner), help_text=help_text,
                     required=required)

    # -- ServerArgs.add_cli_args ----------------------------------------------------

    def run(self, server_args: Path) -> dict[str, FlagSpec]:
        mod = self.source.module("sglang.srt.server_args")
        cls = mod.classes.get("ServerArgs") if mod is not None else None
        method = next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                       and f.name == "add_cli_args"), None) if cls is not None else None
        if mod is None or cls is None or method is None:
            raise FlagError(
                f"{server_args} has no ServerArgs.add_cli_args: this SGLang layout is not "
                f"supported by the flag checker (version {sglang_version(self.source.package_dir)}).")
        self.field_names = {s.target.id for _, s in self.fields_of(cls, mod)  # type: ignore[union-attr]
                            if isinstance(s.target, ast.Name)}
        self.scope = Scope(method.body)
        for node in _calls_in_order(method.body):
            func = dotted(node.func)
            if func.endswith(".add_argument"):
                self.add_argument_call(node, mod)
            elif func.split(".")[-1] == "add_cli_args_from_dataclass" and len(node.args) >= 2:
                # The class statement, not a later rebinding of the name (0.5.23
                # rebinds ServerArgs to a msgspec.defstruct of the same fields).
                arg = node.args[1]
                target = ((mod, mod.classes[arg.id]) if isinstance(arg, ast.Name)
                          and arg.id in mod.classes else self.source.value(arg, mod))
                if not (isinstance(target, tuple) and isinstance(target[1], ast.ClassDef)):
                    raise FlagError(f"cannot find the dataclass {ast.unparse(arg)} passed to "
                                    f"add_cli_args_from_dataclass in {server_args}.")
                for field_mod, stmt in self.fields_of(target[1], target[0]):
                    self.dataclass_field(stmt.target.id, stmt, field_mod)  # type: ignore[union-attr]
        for flag in ALWAYS_DECLARED:
            if flag not in self.flags:
                raise FlagError(
                    f"found {len(self.flags)} flags in {server_args} but not --{flag}: this "
                    "SGLang layout is not understood by the flag checker; refusing to guess.")
        return self.flags


def _calls_in_order(body: list[ast.stmt]) -> list[ast.Call]:
    """Every call in a function body in source order, not inside nested definitions."""
    calls: list[ast.Call] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        if isinstance(node, ast.Call):
            calls.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in body:
        visit(stmt)
    return calls


def extract_flags(package_dir: str | Path) -> FlagTable:
    """Every flag the installed SGLang's server parser declares, by canonical name.

    Raises FlagError when package_dir is not an SGLang package or its layout is
    not one this reader understands.
    """
    package_dir = Path(package_dir)
    problem = package_dir_problem(package_dir, ("__init__.py", "srt/server_args.py"))
    if problem:
        raise FlagError(f"{problem} {HINT}")
    flags = _Reader(package_dir).run(package_dir / "srt" / "server_args.py")
    return FlagTable(flags, version=sglang_version(package_dir), package_dir=str(package_dir))
