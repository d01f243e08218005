"""Gloo only on a CPU run.

SGLang creates a ``PyNcclCommunicator`` for every TP group of two or more ranks and disables it only when the NCCL
library cannot be loaded. A CUDA build of torch brings ``nvidia-nccl`` along, so on a CPU-only machine with that
build NCCL loads and the communicator then fails binding a CPU device (``torch.cuda.device(cpu)``). On a CPU
device the communicator is disabled exactly as SGLang disables it without NCCL, and every collective goes through
the group's gloo ``cpu_group``.
"""

from __future__ import annotations

import functools

import torch


def _wrap_init(orig):
    @functools.wraps(orig)
    def __init__(self, group, device, *args, **kwargs):
        dev = torch.device(device) if isinstance(device, str) else device
        if isinstance(dev, torch.device) and dev.type == "cpu":
            import torch.distributed as dist

            self.group = group
            self.rank = dist.get_rank(group) if not hasattr(group, "rank") else group.rank
            self.world_size = dist.get_world_size(group) if not hasattr(group, "world_size") else group.world_size
            self.available, self.disabled = False, True
            return None
        return orig(self, group, device, *args, **kwargs)

    __init__.__specdecode_cpu__ = True
    return __init__


def install() -> None:
    from sglang.srt.distributed.device_communicators.pynccl import PyNcclCommunicator

    if not getattr(PyNcclCommunicator.__init__, "__specdecode_cpu__", False):
        PyNcclCommunicator.__init__ = _wrap_init(PyNcclCommunicator.__init__)
