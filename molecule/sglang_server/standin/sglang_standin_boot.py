"""Let `python -m sglang.launch_server` reach the stand-in without SGLang's dependencies.

Imported from sglang_standin.pth only when SGLANG_STANDIN is set (the unit's
environment file in the Molecule scenario). It registers the installed sglang
package without running its __init__ (which imports torch, numpy and
transformers, absent in CI), so that runpy finds sglang/launch_server.py.
"""

import importlib.util
import sys

_spec = importlib.util.find_spec("sglang")
if _spec is not None and "sglang" not in sys.modules:
    sys.modules["sglang"] = importlib.util.module_from_spec(_spec)
