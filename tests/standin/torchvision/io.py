"""STAND-IN (see __init__.py): the one name SGLang imports at module level."""


def decode_jpeg(*_args, **_kwargs):
    raise NotImplementedError("stand-in torchvision (tests/standin): no image decoding here")
