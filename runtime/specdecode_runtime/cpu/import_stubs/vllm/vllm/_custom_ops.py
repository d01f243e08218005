"""``rotary_embedding`` in torch (see ``specdecode_runtime.cpu.rotary``)."""

from specdecode_runtime.cpu.rotary import rotary_embedding  # noqa: F401

__specdecode_cpu__ = True
