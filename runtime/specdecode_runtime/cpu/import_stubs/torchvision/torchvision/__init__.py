"""Found only through the PYTHONPATH entry that ``specdecode_runtime.cpu.import_paths`` adds for CPU runs where the
real torchvision cannot be imported: replaces itself with the runtime's torchvision stub before SGLang's modules
(unpickled first in every spawned SGLang process) import it."""

from specdecode_runtime.cpu.torchvision_stub import STUB_VERSION, TORCHVISION_MODULES, _install

_install(TORCHVISION_MODULES, STUB_VERSION)
