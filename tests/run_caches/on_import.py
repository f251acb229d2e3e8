"""Patch a module right after its first import, without importing it at start-up (the run caches'
hooks: tests/run_caches/sitecustomize.py). Test infrastructure only."""

from __future__ import annotations

import sys


class Then:
    """A module's own loader, then patch(module) once it has run. (A plain class: importlib.abc
    would cost every Python about 30 ms at start-up, typing included.)"""

    def __init__(self, loader, patch) -> None:
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self._loader, name)


class PatchOnImport:
    """A meta path finder that finds nothing itself: it wraps the loader that the others find."""

    def __init__(self, patches: dict) -> None:
        self._patches = patches

    def find_spec(self, fullname, path, target=None):
        patch = self._patches.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = Then(spec.loader, patch)
                return spec
        return None

    @classmethod
    def add(cls, patches: dict) -> bool:
        """Patch each module named in patches (name: function of the module) on its first import;
        False where one of them is already imported or already patched."""
        if any(name in sys.modules for name in patches) or any(
                name in finder._patches for finder in sys.meta_path if isinstance(finder, cls) for name in patches):
            return False
        sys.meta_path.insert(0, cls(patches))
        return True
