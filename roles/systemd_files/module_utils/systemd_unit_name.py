"""A service's unit name: one systemd accepts, without a unit-type suffix (the roles add '.service').

Shared by the server's and the gateway's settings checks (sglang_server_unit_name,
sglang_router_unit_name) and the node's unit (gpu_host_unit_name, through systemd_owned);
each message names the variable it came from.
"""

from __future__ import annotations

import re
from typing import Any, Optional

# systemd's unit name prefix (no '\\' escapes), without the '.service' suffix we add.
UNIT_NAME_RE = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9_:.-]{0,246}")
# A name ending in a unit type's suffix makes systemctl address that unit, not our service.
UNIT_SUFFIXES = (".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target", ".path",
                 ".timer", ".slice", ".scope")


def unit_name_problem(value: Any, variable: str = "sglang_server_unit_name", default: str = "sglang") -> Optional[str]:
    """A message naming ``variable`` unless ``value`` is a service name systemd accepts, else None."""
    text = value if isinstance(value, str) else ""
    suffix = next((s for s in UNIT_SUFFIXES if text.endswith(s)), "")
    if UNIT_NAME_RE.fullmatch(text) and not suffix:
        return None
    if suffix:
        example = text[:-len(suffix)] or default
        return (f"{variable} must be a unit name systemd accepts, without '.service' or "
                f"another unit type's suffix: {value!r} ends in {suffix!r}, so systemctl would address "
                f"that {suffix[1:]} unit, not the service ({', '.join(UNIT_SUFFIXES)} are unit types). "
                f"Give the name without it{f', e.g. {example!r}' if example else ''}; "
                "the role adds '.service'")
    return (f"{variable} must be a unit name systemd accepts, without '.service' "
            f"(ASCII letters, digits, ':', '_', '.', '-'; not starting with '-' or '.'; no '@'; "
            f"at most 247 characters), got {value!r}")
