#!/usr/bin/python
"""Ansible module: one replica in or out of the smg gateway's worker set, waited for in-process."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_router_membership import MembershipError, base_url_problem, converge, http_client

DOCUMENTATION = r"""
---
module: sglang_router_worker
short_description: Put one replica into the smg gateway or take it out, and wait until the gateway says so
description:
  - Reads C(GET /workers) of the gateway; first waits while a removal of this URL still drains
    there (smg 1.13.0 drains a removed worker for 5 s, and a second C(DELETE) meanwhile would let
    the first removal take out a worker put back in between).
  - I(state=absent) sends C(DELETE /workers/{id}) for each entry of the URL and waits until none
    is listed; I(state=present) sends C(POST /workers) when the URL is not listed and waits until
    it is listed once and healthy.
  - In check mode it reads and waits out a pending removal, and sends nothing.
  - Run it where the gateway answers on I(gateway) (the gateway's host).
options:
  gateway:
    description: >-
      The gateway's base URL as its own host reaches it (http://127.0.0.1:30000). Anything but
      http(s)://HOST:PORT is refused before any request is sent, and the same holds for I(url).
    type: str
    required: true
  url:
    description: The replica's worker URL.
    type: str
    required: true
  state:
    description: present puts the replica in and waits until healthy; absent takes it out.
    type: str
    required: true
    choices: [present, absent]
  api_key:
    description: The gateway's API key, sent as a bearer token when not empty.
    type: str
    default: ""
  timeout:
    description: Seconds for the whole of it, the waits included.
    type: int
    default: 120
"""

RETURN = r"""
before: {description: listed or absent, before this run, type: str, returned: always}
after: {description: listed or absent, what the gateway says after it (in check mode, what it would), type: str, returned: always}
workers: {description: the gateway's last GET /workers list, type: list, returned: always}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gateway": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "state": {"type": "str", "required": True, "choices": ["present", "absent"]},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    params = module.params
    for option in ("gateway", "url"):
        problem = base_url_problem(params[option])
        if problem:
            module.fail_json(msg=f"{option}={params[option]!r} is not a base URL: expected http://HOST:PORT such as "
                                 f"http://127.0.0.1:30000, but {problem}. Nothing was sent to the gateway.")
    try:
        result = converge(http_client(params["gateway"], params["api_key"]), params["url"], params["state"],
                          params["timeout"], module.check_mode)
    except MembershipError as error:
        module.fail_json(msg=str(error))
    place = {"listed": "in the gateway", "absent": "not in the gateway"}
    module.exit_json(changed=result["changed"], before=result["before"], after=result["after"],
                     workers=result["workers"],
                     diff={"before": f"{params['url']}: {place[result['before']]}\n",
                           "after": f"{params['url']}: {place[result['after']]}\n"})


if __name__ == "__main__":
    main()
