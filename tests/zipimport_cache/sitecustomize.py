"""On PYTHONPATH in the tests: zipimport_code_cache for each Python they start (see that module)."""

import zipimport_code_cache

zipimport_code_cache.install()
