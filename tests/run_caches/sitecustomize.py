"""On PYTHONPATH in the tests: zipimport_code_cache and ansible_yaml_cache for each Python they
start (see those modules).

It shadows Debian's /etc/python3.X/sitecustomize.py, which only installs apport's crash handler
where apport is installed (Ubuntu); nothing the tests run needs that.
"""

import ansible_yaml_cache
import zipimport_code_cache

zipimport_code_cache.install()
ansible_yaml_cache.install()
