"""On PYTHONPATH in the tests: the run caches for each Python they start (see each module):
zipimport_code_cache, ansible_yaml_cache and ansiballz_scan_cache.

It shadows Debian's /etc/python3.X/sitecustomize.py, which only installs apport's crash handler
where apport is installed (Ubuntu); nothing the tests run needs that.
"""

import ansiballz_scan_cache
import ansible_yaml_cache
import zipimport_code_cache

zipimport_code_cache.install()
ansible_yaml_cache.install()
ansiballz_scan_cache.install()
