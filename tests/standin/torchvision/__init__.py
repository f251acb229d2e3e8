"""STAND-IN for torchvision, for tests/test_sglang_flags_real_parser.py only.

SGLang 0.5.20's sglang.srt.utils.common imports `torchvision.io.decode_jpeg` at module level.
PyPI's torchvision cannot be imported beside the CPU build of torch 2.13.0 that this machine
has ("operator torchvision::nms does not exist"), and the argument parser never decodes an
image: this package holds only that name, and it refuses to run.
"""
