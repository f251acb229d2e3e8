"""Static values of SGLang's source: what a name, constant or choice list is, without running it.

SGLang cannot be imported where it has no torch (the demo, ``--no-deps``
installs, CI), so the flag reader parses the package's modules with :mod:`ast`
and evaluates the few expression forms releases 0.5.6 to 0.5.23 use for flag
names, help and choices: literals, ``*`` unpacking and ``+`` of lists, names
bound once in a module, a function or a class (plus ``.append``/``.add`` in the
same scope), ``from sglang... import`` of them, class attributes, and
``list()``/``tuple()``/``set()``/``frozenset()``. Anything else is UNKNOWN:
a flag whose choices are UNKNOWN accepts any value.

Standard library only, so it runs as Ansible module_utils on the target.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from ansible.module_utils.sglang_flag_table import FlagError

# Calls that change a bound list or set; only APPENDS are understood.
MUTATORS = {"append", "extend", "add", "update", "insert", "remove", "discard", "pop", "clear"}
APPENDS = {"append", "add"}
MAX_DEPTH = 12
HINT = ("Point package_dir at the sglang package directory "
        "(<venv>/lib/python3.X/site-packages/sglang), or python at the SGLang "
        "virtualenv's interpreter.")


class _Unknown:
    """A value that cannot be known without running SGLang."""

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN = _Unknown()


@dataclass
class Module:
    """One parsed module of the package: its top-level names, imports and classes."""

    name: str
    path: Path
    tree: ast.Module
    assigns: dict[str, list[ast.stmt]] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


def dotted(node: Optional[ast.AST]) -> str:
    """``a.b.c`` for a Name/Attribute chain, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def scope_bindings(body: Iterable[ast.stmt]) -> tuple[dict[str, list[ast.stmt]], list[ast.Call]]:
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
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) or (
                isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value):
            assigns.setdefault(node.target.id, []).append(node)  # type: ignore[union-attr]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name)):
            mutations.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return assigns, mutations


class Scope:
    """Names bound in one function or class body."""

    def __init__(self, body: Iterable[ast.stmt]) -> None:
        self.assigns, self.mutations = scope_bindings(body)

    def resolve(self, name: str, source: "Source", mod: Module, depth: int) -> Any:
        value = source.assigned(self.assigns[name], mod, depth + 1, self)
        # choices.append("x") under an if: the value may be any of them, so
        # accept the union; anything else done to the name makes it unknown.
        for call in self.mutations:
            if call.func.value.id != name:  # type: ignore[attr-defined]
                continue
            args = [source.value(a, mod, self, depth + 1) for a in call.args]
            if (not isinstance(value, list) or call.func.attr not in APPENDS  # type: ignore[attr-defined]
                    or len(args) != 1 or args[0] is UNKNOWN):
                return UNKNOWN
            value = value + args
        return value


class Source:
    """Parsed modules of one installed sglang package, loaded on demand."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self.modules: dict[str, Optional[Module]] = {}

    def module(self, name: str) -> Optional[Module]:
        """The module ``sglang.x.y`` of this package (None where it has none)."""
        if name in self.modules:
            return self.modules[name]
        mod: Optional[Module] = None
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

    @staticmethod
    def _parse(name: str, path: Path) -> Module:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            raise FlagError(f"cannot parse {path}: {exc}. Reinstall SGLang. {HINT}") from exc
        mod = Module(name=name, path=path, tree=tree)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                mod.classes[node.name] = node
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for alias in node.names:
                    mod.imports[alias.asname or alias.name] = (node.module, alias.name)
        mod.assigns, _ = scope_bindings(
            n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        return mod

    def value(self, node: Optional[ast.AST], mod: Module, scope: Optional[Scope] = None,
              depth: int = 0) -> Any:
        """The value of an expression: a constant, a list or tuple of them, a
        (Module, ClassDef) pair for a class, a Module, or UNKNOWN."""
        if node is None or depth > MAX_DEPTH:
            return UNKNOWN
        d = depth + 1
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list[Any] = []
            for elt in node.elts:
                starred = isinstance(elt, ast.Starred)
                item = self.value(elt.value if starred else elt, mod, scope, d)  # type: ignore[attr-defined]
                if item is UNKNOWN or starred and not isinstance(item, (list, tuple)):
                    return UNKNOWN
                out.extend(item) if starred else out.append(item)
            return tuple(out) if isinstance(node, ast.Tuple) else out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.value(node.left, mod, scope, d)
            right = self.value(node.right, mod, scope, d)
            if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                return list(left) + list(right)
            return UNKNOWN
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1
                and node.func.id in ("list", "tuple", "set", "frozenset")):
            inner = self.value(node.args[0], mod, scope, d)
            if not isinstance(inner, (list, tuple)):
                return UNKNOWN
            return list(dict.fromkeys(inner)) if "set" in node.func.id else list(inner)
        if isinstance(node, ast.Name):
            return self.name(node.id, mod, scope, d)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, mod, scope, d)
        return UNKNOWN

    def name(self, name: str, mod: Module, scope: Optional[Scope], depth: int) -> Any:
        """What a plain name means in a scope of a module."""
        if scope is not None and name in scope.assigns:
            return scope.resolve(name, self, mod, depth)
        if name in mod.assigns:
            return self.assigned(mod.assigns[name], mod, depth)
        if name in mod.imports:
            source, attr = mod.imports[name]
            other = self.module(source)
            if other is not None and (attr in other.assigns or attr in other.imports
                                      or attr in other.classes):
                return self.name(attr, other, None, depth + 1)
            submodule = self.module(f"{source}.{attr}")  # from package import module
            return submodule if submodule is not None else UNKNOWN
        if name in mod.classes:
            return (mod, mod.classes[name])
        return UNKNOWN

    def assigned(self, statements: list[ast.stmt], mod: Module, depth: int,
                 scope: Optional[Scope] = None) -> Any:
        """The value of a name bound exactly once in a scope."""
        if len(statements) != 1 or not isinstance(statements[0], (ast.Assign, ast.AnnAssign)):
            return UNKNOWN
        return self.value(statements[0].value, mod, scope, depth)

    def _attribute(self, node: ast.Attribute, mod: Module, scope: Optional[Scope],
                   depth: int) -> Any:
        owner = self.value(node.value, mod, scope, depth)
        if isinstance(owner, tuple) and len(owner) == 2 and isinstance(owner[1], ast.ClassDef):
            owner_mod, cls = owner
            class_scope = Scope(cls.body)
            if node.attr in class_scope.assigns:
                return class_scope.resolve(node.attr, self, owner_mod, depth)
        return UNKNOWN

    def text(self, node: Optional[ast.AST], mod: Module) -> str:
        """Help or message text; the literal parts of an f-string."""
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value for v in node.values
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
        value = self.value(node, mod)
        return value if isinstance(value, str) else ""
