"""On PYTHONPATH in the tests: zipimport_code_cache for each Python they start (see that module).

It shadows Debian's /etc/python3.X/sitecustomize.py, which only installs apport's crash handler
where apport is installed (Ubuntu); nothing the tests run needs that.
"""

import zipimport_code_cache

zipimport_code_cache.install()
