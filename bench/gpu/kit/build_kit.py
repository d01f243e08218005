#!/usr/bin/env python3
"""Build the GPU test bed's offline kit in ``.gpu-kit/``: SGLang 0.5.23 and what it needs on a GPU image without it.

The kit is for GPU machines with no network whose torch does not match the ``sglang-kernel`` build (the project's own
runtime image has the real kernels and does not need it). It holds:

- SGLang 0.5.23 re-packed as a pure wheel: the published wheel is cp311-only because of optional Rust extensions;
  its Python code runs on 3.12 (the radix cache falls back to its Python tree). ``*.so``, ``multimodal_gen``,
  ``test``, ``benchmark`` and ``__pycache__`` are left out, and two modules with hard optional imports get a wrapper;
- the small wheels the GPU image lacks (cp312 / pure, pinned below);
- a torch stand-in ``sgl_kernel`` wheel built from ``bench/gpu/kit/standin``;
- ``MANIFEST.json``: every file with its sha256 and size, and the hash of the inputs.

The kit is cached by that input hash: a run with unchanged inputs prints the folder and downloads nothing.
Usage (repository root, needs PyPI): ``python3 bench/gpu/kit/build_kit.py [--check] [--force]``.
"""

from __future__ import annotations

import argparse
import ast
import base64
import csv
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[3]
KIT = ROOT / ".gpu-kit"
STANDIN = Path(__file__).resolve().parent / "standin"
MAX_BYTES = 56 * 1024 * 1024  # the repository (~5 MB) and the kit travel together under 64 MiB


def _pinned_sglang() -> str:
    """The runtime's one SGLang pin (runtime/specdecode_runtime/contract/versions.py), read without importing it."""
    tree = ast.parse((ROOT / "runtime/specdecode_runtime/contract/versions.py").read_text())
    return next(
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SGLANG_VERSION"
    )


SGLANG_VERSION = _pinned_sglang()
SGLANG_PLATFORM = ["--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux_2_34_x86_64"]
TARGET_PLATFORM = ["--python-version", "3.12", "--implementation", "cp"] + [
    arg
    for tag in (
        "manylinux_2_28_x86_64",
        "manylinux_2_27_x86_64",
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
        "manylinux1_x86_64",
    )
    for arg in ("--platform", tag)
]
DROP_PREFIXES = ("sglang/multimodal_gen/", "sglang/test/", "sglang/benchmark/")

# Versions from requirements/sglang-cpu.txt (the set the CPU contract tests run against).
PINS_FROM_CPU_REQUIREMENTS = {
    "annotated-types": "0.8.0",
    "apache-tvm-ffi": "0.1.15.post2",
    "compressed-tensors": "0.20.1",
    "dill": "0.4.1",
    "fastapi": "0.165.0",
    "gguf": "0.19.0",
    "httpcore2": "2.16.2",
    "httpx2": "2.16.2",
    "ipython": "9.18.1",
    "jsonschema": "4.26.0",
    "loguru": "0.7.3",
    "msgspec": "0.23.0",
    "openai": "3.57.0",
    "opentelemetry-api": "1.45.2",
    "orjson": "3.13.0",
    "partial-json-parser": "0.2.1.1.post7",
    "pybase64": "1.5.1",
    "pydantic": "2.14.4",
    "pydantic_core": "2.50.5",
    "python-multipart": "0.0.34",
    "pyzmq": "27.3.0",
    "referencing": "0.37.0",
    "setproctitle": "1.3.8",
    "soundfile": "0.14.0",
    "sniffio": "1.3.1",
    "starlette": "1.10.0",
    "traitlets": "5.16.1",
    "truststore": "0.10.5",
    "typing-inspection": "0.4.5",
    "uvicorn": "0.54.0",
    "xgrammar": "0.2.8",
}
# Import-time dependencies of the above that the GPU image lacks; versions current on PyPI on 2026-12-02.
PINS_IMPORT_DEPENDENCIES = {
    "argcomplete": "3.7.2",
    "asttokens": "3.0.2",
    "cffi": "2.1.1",
    "decorator": "5.3.1",
    "distro": "1.9.0",
    "executing": "2.3.0",
    "jedi": "0.20.1",
    "jiter": "0.19.0",
    "jsonschema-specifications": "2025.9.1",
    "matplotlib-inline": "0.2.2",
    "parso": "0.8.7",
    "pexpect": "4.9.0",
    "prompt_toolkit": "3.0.53",
    "ptyprocess": "0.7.0",
    "pure-eval": "0.2.4",
    "pycparser": "3.12",
    "rpds-py": "2026.9.1",
    "stack-data": "0.6.3",
    "wcwidth": "0.9.4",
}
PINS = {**PINS_FROM_CPU_REQUIREMENTS, **PINS_IMPORT_DEPENDENCIES}

# Modules whose top-level optional imports stop SGLang from importing on a GPU image without them. Each is renamed to
# a private sibling; a wrapper re-exports it when it imports and otherwise defines only what callers use.
DUAL_GEMM = "sglang/kernels/ops/gemm/cutedsl_dual_gemm.py"
FLASHMLA = "sglang/srt/layers/attention/flashmla_backend.py"

WRAPPER_HEAD = '''"""{doc}

This wrapper re-exports the original module,
``{impl}``,
when its imports are available. When an optional package outside SGLang is missing it defines only what SGLang's
callers use, so importing the model code does not require that package; a missing SGLang module still fails.
"""

import importlib as _importlib

try:
    _impl = _importlib.import_module("{impl}")
except ModuleNotFoundError as _missing:
    if (_missing.name or "sglang").split(".")[0] == "sglang":
        raise
    _MISSING = _missing
{fallback}
else:
    globals().update({{k: v for k, v in vars(_impl).items() if not (k.startswith("__") and k.endswith("__"))}})
'''

DUAL_GEMM_FALLBACK = '''
    from enum import IntEnum

{max_tokens}

{quant_mode}

    def can_use_dual_gemm({params}) -> bool:
        """The fused dual GEMM needs CUTLASS DSL (SM100 only); without it the unfused path is used."""
        return False

    def dual_gemm_swiglu(*args, **kwargs):
        raise NotImplementedError(f"dual_gemm_swiglu needs the CUTLASS DSL: {{_MISSING}}")

    def dual_gemm_swiglu_fp8(*args, **kwargs):
        raise NotImplementedError(f"dual_gemm_swiglu_fp8 needs the CUTLASS DSL: {{_MISSING}}")
'''

FLASHMLA_FALLBACK = '''
    class FlashMLABackend:
        """Type for ``isinstance`` checks; constructing it needs flash_mla."""

        def __init__(self, *args, **kwargs):
            raise ModuleNotFoundError(f"the flashmla attention backend needs flash_mla: {_MISSING}")

    class FlashMLAMultiStepDraftBackend(FlashMLABackend):
        pass
'''


def fail(message: str) -> NoReturn:
    print(f"build_kit: {message}", file=sys.stderr)
    raise SystemExit(1)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def standin_sources() -> list[Path]:
    return sorted(
        p
        for p in STANDIN.rglob("*")
        if p.is_file()
        and p.suffix in {".py", ".toml", ""}
        and "__pycache__" not in p.parts
        and not any(part.endswith(".egg-info") or part == "build" for part in p.relative_to(STANDIN).parts)
    )


def input_hash() -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).resolve().read_bytes())
    for p in standin_sources():
        h.update(str(p.relative_to(STANDIN)).encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(json.dumps({"sglang": SGLANG_VERSION, "pins": PINS}, sort_keys=True).encode())
    return h.hexdigest()


def cache_is_current(expected: str) -> bool:
    manifest = KIT / "MANIFEST.json"
    if not manifest.is_file():
        return False
    try:
        data = json.loads(manifest.read_text())
    except ValueError:
        return False
    if data.get("input_hash") != expected:
        return False
    present = {p.name for p in KIT.iterdir() if p.name != "MANIFEST.json"}
    if present != {f["name"] for f in data["files"]}:
        return False
    return all(
        (KIT / f["name"]).stat().st_size == f["size"] and sha256_file(KIT / f["name"]) == f["sha256"]
        for f in data["files"]
    )


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"{' '.join(cmd)} failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}")


def record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def dual_gemm_wrapper(original: str) -> str:
    tree = ast.parse(original)
    max_tokens = quant_mode = params = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MAX_DUAL_GEMM_DECODE_TOKENS" for t in node.targets
        ):
            max_tokens = ast.get_source_segment(original, node)
        elif isinstance(node, ast.ClassDef) and node.name == "DualGemmQuantMode":
            quant_mode = ast.get_source_segment(original, node)
        elif isinstance(node, ast.FunctionDef) and node.name == "can_use_dual_gemm":
            params = ", ".join(a.arg for a in node.args.args)
    if not (max_tokens and quant_mode and params):
        fail(f"{DUAL_GEMM} no longer defines MAX_DUAL_GEMM_DECODE_TOKENS, DualGemmQuantMode and can_use_dual_gemm")
    indent = lambda text: "\n".join("    " + line if line else line for line in text.splitlines())  # noqa: E731
    fallback = DUAL_GEMM_FALLBACK.format(
        max_tokens=indent(max_tokens), quant_mode=indent(quant_mode), params=params
    ).rstrip()
    return WRAPPER_HEAD.format(
        doc="SM100 fused dual GEMM (gate/up + SwiGLU); CUTLASS DSL is optional.",
        impl="sglang.kernels.ops.gemm._cutedsl_dual_gemm_impl",
        fallback=fallback,
    )


def flashmla_wrapper() -> str:
    return WRAPPER_HEAD.format(
        doc="FlashMLA attention backend; flash_mla is optional.",
        impl="sglang.srt.layers.attention._flashmla_backend_impl",
        fallback=FLASHMLA_FALLBACK.rstrip(),
    )


def private_sibling(path: str) -> str:
    folder, _, name = path.rpartition("/")
    return f"{folder}/_{name[:-3]}_impl.py"


def repack_sglang(source: Path, dest_dir: Path) -> Path:
    """Rewrite the cp311 wheel as a pure py3 wheel without the native and unused parts."""
    dist_info = f"sglang-{SGLANG_VERSION}.dist-info"
    entries: dict[str, bytes] = {}
    with zipfile.ZipFile(source) as zin:
        for info in zin.infolist():
            name = info.filename
            if info.is_dir() or name.endswith(".so") or "__pycache__/" in name or name.startswith(DROP_PREFIXES):
                continue
            if name in (f"{dist_info}/RECORD", f"{dist_info}/WHEEL"):
                continue
            entries[name] = zin.read(info)
    for path in (DUAL_GEMM, FLASHMLA):
        if path not in entries:
            fail(f"{path} is missing from sglang {SGLANG_VERSION}")
    entries[private_sibling(DUAL_GEMM)] = entries[DUAL_GEMM]
    entries[DUAL_GEMM] = dual_gemm_wrapper(entries[DUAL_GEMM].decode()).encode()
    entries[private_sibling(FLASHMLA)] = entries[FLASHMLA]
    entries[FLASHMLA] = flashmla_wrapper().encode()
    for path in (DUAL_GEMM, FLASHMLA):
        compile(entries[path], path, "exec")
    entries[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: specdecode bench/gpu/kit/build_kit.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    out = dest_dir / f"sglang-{SGLANG_VERSION}-py3-none-any.whl"
    rows = [record_line(name, data) for name, data in sorted(entries.items())]
    rows.append([f"{dist_info}/RECORD", "", ""])
    record = io.StringIO()
    csv.writer(record, lineterminator="\n").writerows(rows)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        for name, data in sorted(entries.items()):
            zout.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
        zout.writestr(
            zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0)),
            record.getvalue(),
            zipfile.ZIP_DEFLATED,
        )
    return out


def build(expected: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gpu-kit-") as tmp:
        tmp = Path(tmp)
        staging, downloads = tmp / "kit", tmp / "downloads"
        staging.mkdir()
        downloads.mkdir()
        print(f"build_kit: downloading sglang=={SGLANG_VERSION}", flush=True)
        pip(
            "download",
            "--no-deps",
            "--only-binary=:all:",
            *SGLANG_PLATFORM,
            "-d",
            str(downloads),
            f"sglang=={SGLANG_VERSION}",
        )
        (source,) = downloads.glob("sglang-*.whl")
        repack_sglang(source, staging)
        print(f"build_kit: downloading {len(PINS)} wheels for Python 3.12", flush=True)
        pip(
            "download",
            "--no-deps",
            "--only-binary=:all:",
            *TARGET_PLATFORM,
            "-d",
            str(staging),
            *(f"{name}=={version}" for name, version in sorted(PINS.items())),
        )
        print("build_kit: building the sgl_kernel stand-in", flush=True)
        src = tmp / "standin"
        shutil.copytree(STANDIN, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        pip("wheel", "--no-deps", "-q", "-w", str(staging), str(src))
        files = sorted(staging.iterdir())
        total = sum(p.stat().st_size for p in files)
        if total > MAX_BYTES:
            listing = "\n".join(f"  {p.stat().st_size:>10}  {p.name}" for p in files)
            fail(
                f"kit is {total / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB allowed "
                f"(it travels with the repository under 64 MiB):\n{listing}"
            )
        manifest = {
            "input_hash": expected,
            "sglang": SGLANG_VERSION,
            "total_bytes": total,
            "files": [{"name": p.name, "sha256": sha256_file(p), "size": p.stat().st_size} for p in files],
        }
        (staging / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if KIT.exists():
            shutil.rmtree(KIT)
        shutil.move(str(staging), KIT)
    print(f"build_kit: {len(files)} wheels, {total / 2**20:.1f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 0 if .gpu-kit/ matches the current inputs, else 1")
    parser.add_argument("--force", action="store_true", help="rebuild even if the cached kit is current")
    args = parser.parse_args(argv)
    expected = input_hash()
    current = cache_is_current(expected)
    if args.check:
        print(f"build_kit: {KIT} is {'current' if current else 'missing or stale'} (inputs {expected[:12]})")
        return 0 if current else 1
    if current and not args.force:
        print(KIT)
        return 0
    build(expected)
    print(KIT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
