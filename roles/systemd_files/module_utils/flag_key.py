"""A flag key as a user wrote it: the part a message may show, and the part it must not.

Shared by the server's settings check (sglang_settings) and the gateway's (sglang_router_flags):
both turn a dict of flag name -> value into a command line, and both refuse a key with a value
in it without showing that value.
"""

from __future__ import annotations

import re

# What a flag name is made of; what follows any other character of a key may be a value, and so
# a secret ('api-key=sk-...', 'api-key sk-...', 'token:sk-...').
NAME_CHARS_RE = re.compile(r"[A-Za-z0-9_-]")


def split_key(key: str) -> tuple[str, str]:
    """(what a message may show, what it must not) of a flag key: cut after its first separator.

    A separator is any character outside NAME_CHARS_RE. A key without one is shown whole.
    """
    cut = next((i for i, char in enumerate(key) if not NAME_CHARS_RE.fullmatch(char)), len(key))
    return key[:cut + 1], key[cut + 1:]
