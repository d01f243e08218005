"""Imported once by a forkserver so gloo children start with sglang's worker stack already loaded (an sglang
import costs ~25 s on this machine's 2 shared cores)."""

from specdecode_runtime.cpu.torchvision_stub import install

install()

import sglang.srt.managers.scheduler  # noqa: E402,F401
import sglang.srt.managers.scheduler_components.batch_result_processor  # noqa: E402,F401
import sglang.srt.speculative.eagle_worker_v2  # noqa: E402,F401
import torch.distributed  # noqa: E402,F401
