"""The GPU link matrix of one node (``nvidia-smi topo -m``), read so that S can sit on the shortest links.

Parsing is pure text handling, so placement is decided (and tested) without a GPU; on a machine without
``nvidia-smi`` :func:`detect_topology` answers None and the caller falls back to ranks ``0..d-1``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

# nvidia-smi topo -m link kinds, nearest first. NV# (NVLink, any count) is nearer than any PCIe path.
_PCIE_RANK = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}


@dataclass(frozen=True)
class GpuTopology:
    """Link kinds between the GPUs of one node, indexed by local GPU index (= TP rank within the node here).

    ``links[i][j]`` is an ``nvidia-smi topo -m`` cell: ``X``, ``NV<n>``, ``PIX``, ``PXB``, ``PHB``, ``NODE``,
    ``SYS``.
    """

    links: tuple[tuple[str, ...], ...]

    @property
    def size(self) -> int:
        return len(self.links)

    def distance(self, i: int, j: int) -> int:
        """Smaller is nearer: 0 self, 1 NVLink, then PIX/PXB (one PCIe switch), PHB, NODE, SYS."""
        cell = self.links[i][j]
        if cell == "X":
            return 0
        if cell.startswith("NV"):
            return 1
        return 1 + _PCIE_RANK.get(cell, 6)

    def island(self, rank: int) -> list[int]:
        """GPUs sharing ``rank``'s NVLink island when it has NVLink peers, else its PCIe switch (PIX/PXB)."""
        nv = [j for j in range(self.size) if j == rank or self.links[rank][j].startswith("NV")]
        if len(nv) > 1:
            return nv
        return [j for j in range(self.size) if j == rank or self.links[rank][j] in ("PIX", "PXB")]


def parse_nvidia_smi_topo(text: str) -> GpuTopology:
    """Parse the GPU block of ``nvidia-smi topo -m`` (header ``GPU0 GPU1 ...``, then one ``GPUi`` row per GPU)."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    header_idx = next((i for i, ln in enumerate(lines) if re.match(r"^\s*GPU0(\s|$)", ln)), None)
    if header_idx is None:
        raise ValueError("no GPU0 header in nvidia-smi topo output")
    gpus = [c for c in lines[header_idx].split() if re.fullmatch(r"GPU\d+", c)]
    n = len(gpus)
    rows: list[tuple[str, ...]] = []
    for ln in lines[header_idx + 1 :]:
        cells = ln.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            break
        rows.append(tuple(cells[1 : n + 1]))
    if len(rows) != n or any(len(r) != n for r in rows):
        raise ValueError(f"nvidia-smi topo: expected a {n}x{n} GPU matrix")
    return GpuTopology(links=tuple(rows))


def detect_topology(timeout: float = 10.0) -> GpuTopology | None:
    """``nvidia-smi topo -m`` of this node, or None when it is not available or unparseable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout, check=True)
        return parse_nvidia_smi_topo(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
