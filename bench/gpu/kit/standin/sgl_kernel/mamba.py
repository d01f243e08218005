"""``sgl_kernel.mamba`` stand-in: every op importable, none implemented (see ``_missing``)."""

from ._missing import missing_op


def __getattr__(name: str):
    return missing_op(__name__, name)
