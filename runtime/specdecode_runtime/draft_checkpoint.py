"""A draft checkpoint directory as the in-place swap reads it (docs/runtime.md "Loading a new draft in place").

The served draft's checkpoint is the reference (:class:`Reference`: its ``config.json`` and every tensor's name,
dtype and shape, read from the file headers at start-up). A new checkpoint is accepted only if its config equals
the reference's (:data:`IGNORED_CONFIG_KEYS` aside) and its tensors have exactly the same names, dtypes and shapes:
then SGLang's own loader writes it into the served parameter tensors without reallocating any of them, so every
captured CUDA graph stays valid. Everything is checked from the headers before a byte of tensor data is read, so a
wrong checkpoint costs no memory and the data read is exactly as large as the served draft.

Formats: ``*.safetensors`` (the files ``model.safetensors.index.json`` names when there is one), else
``pytorch_model*.bin`` (``torch.load`` with ``weights_only``), as SGLang's loader prefers them.

Digest: ``sha256`` over, for each tensor in name order, ``[name, dtype, shape]`` as JSON, the byte count and the
bytes (little-endian, row-major: the safetensors data as stored). It depends on the tensors only, not on how they
are split over files or which format holds them, and costs one pass over data that is read anyway.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .contract import draft_swap as ds

IGNORED_CONFIG_KEYS = frozenset({"_name_or_path", "transformers_version", "_commit_hash"})
MAX_CONFIG_BYTES = 1 << 20
MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit
MAX_FILES = 1024
MAX_LISTED = 4  # tensor names quoted in one refusal
CHUNK = 8 << 20

# safetensors dtype codes; the torch dtype of each is looked up by name (float8 types exist in torch >= 2.1)
DTYPE_SIZES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
TORCH_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


class Refused(ValueError):
    """A checkpoint that cannot replace the served draft: ``cause`` (one of ``contract.draft_swap.CAUSES``) and a
    message for the caller naming what differs."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


@dataclass(frozen=True)
class TensorSpec:
    dtype: str  # safetensors code, e.g. F32
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = DTYPE_SIZES[self.dtype]
        for d in self.shape:
            n *= d
        return n

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class _Entry:
    """Where one tensor's bytes are: a safetensors file and the absolute byte range, or a loaded .bin tensor."""

    spec: TensorSpec
    path: Path
    begin: int = 0
    end: int = 0
    tensor: Any = None  # .bin: the (memory-mapped) tensor itself


@dataclass(frozen=True)
class Reference:
    """The served draft's checkpoint: what a new one must match."""

    source: str
    config: dict[str, Any]
    tensors: dict[str, TensorSpec]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


@dataclass
class Checkpoint:
    """A validated checkpoint in host memory: its tensors (CPU, in the checkpoint's dtypes) and digest."""

    source: str
    digest: str
    tensors: dict[str, Any] = field(repr=False)
    nbytes: int = 0


# ------------------------------------------------------------------------------------------------ files
def source_dir(source: str) -> Path:
    """The checkpoint directory ``source`` names; :class:`Refused` (not found / unreadable) otherwise."""
    if not source.startswith("/"):
        raise Refused(ds.SOURCE, f"{source!r} is not an absolute path")
    p = Path(source)
    try:
        p.stat()
    except FileNotFoundError:
        raise Refused(ds.NOT_FOUND, f"{source}: no such directory") from None
    except OSError as e:
        raise Refused(ds.UNREADABLE, f"{source}: {e.strerror or e}") from None
    if not p.is_dir():
        raise Refused(ds.NOT_FOUND, f"{source}: not a directory (the draft's checkpoint directory is expected)")
    return p


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise Refused(ds.NOT_FOUND, f"{directory}: no config.json") from None
    except OSError as e:
        raise Refused(ds.UNREADABLE, f"{path}: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise Refused(ds.UNREADABLE, f"{path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Refused(ds.UNREADABLE, f"{path}: not valid JSON ({str(e)[:200]})") from None
    if not isinstance(data, dict):
        raise Refused(ds.UNREADABLE, f"{path}: not a JSON object")
    return data


def weight_files(directory: Path) -> tuple[str, list[Path]]:
    """("safetensors" | "bin", files): the safetensors files (those the index names, if there is one), else the
    PyTorch ``.bin`` files."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            with open(index, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES * 16 + 1)
            weight_map = json.loads(raw.decode("utf-8"))["weight_map"]
            names = sorted({str(v) for v in weight_map.values()})
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise Refused(ds.UNREADABLE, f"{index}: not a safetensors index ({str(e)[:200]})") from None
        outside = [n for n in names if Path(n).name != n or n in ("", ".", "..")]
        if outside:
            raise Refused(ds.UNREADABLE, f"{index} names files outside the directory: {outside[:MAX_LISTED]}")
        files = [directory / n for n in names]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise Refused(ds.NOT_FOUND, f"{index} names files that are not there: {missing[:MAX_LISTED]}")
        return "safetensors", files
    files = sorted(directory.glob("*.safetensors"))
    if files:
        return "safetensors", files
    files = sorted(directory.glob("pytorch_model*.bin"))
    if files:
        return "bin", files
    raise Refused(ds.NOT_FOUND, f"{directory}: no *.safetensors or pytorch_model*.bin weight files")


def _safetensors_header(path: Path) -> dict[str, _Entry]:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise Refused(ds.UNREADABLE, f"{path}: too short for a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise Refused(ds.UNREADABLE, f"{path}: damaged safetensors header (length {n}, file {size} bytes)")
            raw = f.read(n)
    except OSError as e:
        raise Refused(ds.UNREADABLE, f"{path}: {e.strerror or e}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Refused(ds.UNREADABLE, f"{path}: damaged safetensors header ({str(e)[:200]})") from None
    if not isinstance(header, dict):
        raise Refused(ds.UNREADABLE, f"{path}: damaged safetensors header (not an object)")
    base = 8 + n
    out: dict[str, _Entry] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = meta["dtype"], tuple(int(d) for d in meta["shape"]), meta["data_offsets"]
            begin, end = int(begin), int(end)
        except (KeyError, TypeError, ValueError):
            raise Refused(ds.UNREADABLE, f"{path}: damaged entry for tensor {name!r}") from None
        if dtype not in DTYPE_SIZES:
            raise Refused(ds.UNREADABLE, f"{path}: tensor {name!r} has a dtype this runtime does not read: {dtype}")
        spec = TensorSpec(str(dtype), shape)
        if any(d < 0 for d in shape) or end - begin != spec.nbytes or begin < 0 or base + end > size:
            raise Refused(
                ds.UNREADABLE,
                f"{path}: tensor {name!r} ({spec.describe()}) has byte range [{begin}, {end}) that does not fit "
                f"its shape or the file",
            )
        out[str(name)] = _Entry(spec, path, base + begin, base + end)
    return out


def _bin_tensors(path: Path) -> dict[str, _Entry]:
    import torch

    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - any failure of the unpickler is an unreadable file
        raise Refused(ds.UNREADABLE, f"{path}: not a PyTorch state dict ({type(e).__name__}: {str(e)[:200]})") from e
    if not isinstance(data, Mapping):
        raise Refused(ds.UNREADABLE, f"{path}: not a PyTorch state dict (a {type(data).__name__})")
    codes = {v: k for k, v in TORCH_NAMES.items()}
    out: dict[str, _Entry] = {}
    for name, t in data.items():
        if not isinstance(t, torch.Tensor):
            raise Refused(ds.UNREADABLE, f"{path}: {name!r} is not a tensor")
        code = codes.get(str(t.dtype).removeprefix("torch."))
        if code is None:
            raise Refused(ds.UNREADABLE, f"{path}: tensor {name!r} has a dtype this runtime does not read: {t.dtype}")
        out[str(name)] = _Entry(TensorSpec(code, tuple(int(d) for d in t.shape)), path, tensor=t)
    return out


def _entries(directory: Path) -> dict[str, _Entry]:
    fmt, files = weight_files(directory)
    if len(files) > MAX_FILES:
        raise Refused(ds.UNREADABLE, f"{directory}: {len(files)} weight files; at most {MAX_FILES} are read")
    out: dict[str, _Entry] = {}
    for path in files:
        part = _safetensors_header(path) if fmt == "safetensors" else _bin_tensors(path)
        twice = sorted(set(part) & set(out))
        if twice:
            raise Refused(ds.UNREADABLE, f"{directory}: tensor(s) {twice[:MAX_LISTED]} in more than one file")
        out.update(part)
    if not out:
        raise Refused(ds.NOT_FOUND, f"{directory}: the weight files hold no tensors")
    return out


# ------------------------------------------------------------------------------------------------ checks
def reference(source: str) -> Reference:
    """The served draft's checkpoint, from its config and file headers (no tensor data is read)."""
    directory = source_dir(source)
    config = read_config(directory)
    return Reference(source, config, {n: e.spec for n, e in _entries(directory).items()})


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def config_differences(served: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    keys = sorted((set(served) | set(new)) - IGNORED_CONFIG_KEYS)
    missing = object()
    out = []
    for k in keys:
        a, b = served.get(k, missing), new.get(k, missing)
        if a != b:
            sa = "absent" if a is missing else _short(a)
            sb = "absent" if b is missing else _short(b)
            out.append(f"{k} ({sa} -> {sb})")
    return out


def compare(ref: Reference, config: Mapping[str, Any], tensors: Mapping[str, TensorSpec]) -> None:
    """:class:`Refused` naming the first kind of difference (config, then missing, extra, shape, dtype)."""
    diff = config_differences(ref.config, config)
    if diff:
        raise Refused(
            ds.CONFIG,
            f"config.json differs from the served draft's in {len(diff)} key(s): {', '.join(diff[:MAX_LISTED])}"
            + (" ..." if len(diff) > MAX_LISTED else ""),
        )
    missing = sorted(set(ref.tensors) - set(tensors))
    if missing:
        raise Refused(
            ds.MISSING_TENSOR,
            f"{len(missing)} tensor(s) of the served draft missing: {missing[:MAX_LISTED]}"
            + (" ..." if len(missing) > MAX_LISTED else ""),
        )
    extra = sorted(set(tensors) - set(ref.tensors))
    if extra:
        raise Refused(
            ds.EXTRA_TENSOR,
            f"{len(extra)} tensor(s) the served draft does not have: {extra[:MAX_LISTED]}"
            + (" ..." if len(extra) > MAX_LISTED else ""),
        )
    shapes = [n for n in sorted(tensors) if tensors[n].shape != ref.tensors[n].shape]
    if shapes:
        listed = [f"{n} {list(tensors[n].shape)} (served {list(ref.tensors[n].shape)})" for n in shapes[:MAX_LISTED]]
        raise Refused(ds.SHAPE, f"{len(shapes)} tensor(s) of another shape: {', '.join(listed)}")
    dtypes = [n for n in sorted(tensors) if tensors[n].dtype != ref.tensors[n].dtype]
    if dtypes:
        listed = [f"{n} {tensors[n].dtype} (served {ref.tensors[n].dtype})" for n in dtypes[:MAX_LISTED]]
        raise Refused(ds.DTYPE, f"{len(dtypes)} tensor(s) of another dtype: {', '.join(listed)}")


# ------------------------------------------------------------------------------------------------ data
def _hash_into(h: Any, name: str, spec: TensorSpec, chunks: Iterable[Any]) -> None:
    h.update(json.dumps([name, spec.dtype, list(spec.shape)]).encode())
    h.update(spec.nbytes.to_bytes(8, "little"))
    for c in chunks:
        h.update(c)


def _file_chunks(f: Any, begin: int, end: int) -> Iterator[bytes]:
    f.seek(begin)
    left = end - begin
    while left > 0:
        buf = f.read(min(CHUNK, left))
        if not buf:
            raise Refused(ds.UNREADABLE, f"{f.name}: ends inside a tensor's data")
        left -= len(buf)
        yield buf


def _tensor_bytes(t: Any) -> Any:
    """The little-endian row-major bytes of a CPU tensor (bfloat16 and float8 included)."""
    import torch

    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().data if flat.numel() else b""


def digest(source: str) -> str:
    """The content digest of a checkpoint directory, streamed (bounded memory): the served draft's at start-up."""
    entries = _entries(source_dir(source))
    h = hashlib.sha256()
    handles: dict[Path, Any] = {}
    try:
        for name in sorted(entries):
            e = entries[name]
            if e.tensor is not None:
                _hash_into(h, name, e.spec, [_tensor_bytes(e.tensor)])
                continue
            f = handles.get(e.path)
            if f is None:
                f = handles[e.path] = open(e.path, "rb")  # noqa: SIM115 - closed below
            _hash_into(h, name, e.spec, _file_chunks(f, e.begin, e.end))
    except OSError as err:
        raise Refused(ds.UNREADABLE, f"{source}: {err.strerror or err}") from None
    finally:
        for f in handles.values():
            f.close()
    return "sha256:" + h.hexdigest()


def _read_range(path: Path, begin: int, end: int) -> bytearray:
    buf = bytearray(end - begin)
    with open(path, "rb") as f:
        f.seek(begin)
        view, got = memoryview(buf), 0
        while got < len(buf):
            n = f.readinto(view[got:])
            if not n:
                raise Refused(ds.UNREADABLE, f"{path}: ends inside the tensor data")
            got += n
    return buf


def load(source: str, ref: Reference) -> Checkpoint:
    """Validate ``source`` against ``ref`` from its config and headers, then read its tensors into host memory and
    digest them. :class:`Refused` names the cause; nothing is read past the first difference."""
    import torch

    directory = source_dir(source)
    config = read_config(directory)
    entries = _entries(directory)
    compare(ref, config, {n: e.spec for n, e in entries.items()})
    # one read per safetensors file, of the span its tensors cover; tensors are views of that buffer
    spans: dict[Path, tuple[int, int]] = {}
    for e in entries.values():
        if e.tensor is None:
            lo, hi = spans.get(e.path, (e.begin, e.end))
            spans[e.path] = (min(lo, e.begin), max(hi, e.end))
    try:
        buffers = {p: (lo, _read_range(p, lo, hi)) for p, (lo, hi) in spans.items()}
    except OSError as err:
        raise Refused(ds.UNREADABLE, f"{source}: {err.strerror or err}") from None
    h = hashlib.sha256()
    tensors: dict[str, Any] = {}
    for name in sorted(entries):
        e = entries[name]
        if e.tensor is not None:
            t = e.tensor.contiguous()
            _hash_into(h, name, e.spec, [_tensor_bytes(t)])
        else:
            lo, buf = buffers[e.path]
            view = memoryview(buf)[e.begin - lo : e.end - lo]
            _hash_into(h, name, e.spec, [view])
            dtype = getattr(torch, TORCH_NAMES[e.spec.dtype])
            if e.spec.nbytes == 0:
                t = torch.empty(e.spec.shape, dtype=dtype)
            else:
                t = torch.frombuffer(
                    buf, dtype=dtype, count=e.spec.nbytes // DTYPE_SIZES[e.spec.dtype], offset=e.begin - lo
                )
                t = t.reshape(e.spec.shape)
        tensors[name] = t
    return Checkpoint(source, "sha256:" + h.hexdigest(), tensors, sum(e.spec.nbytes for e in entries.values()))


def describe_source(source: str) -> str:
    """``source`` as logs quote it (a path, shortened when very long)."""
    return source if len(source) <= 200 else source[:100] + "..." + source[-97:]


__all__ = [
    "Checkpoint",
    "IGNORED_CONFIG_KEYS",
    "Reference",
    "Refused",
    "TensorSpec",
    "compare",
    "config_differences",
    "digest",
    "load",
    "reference",
    "source_dir",
]
