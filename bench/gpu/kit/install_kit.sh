# Install the GPU test bed's offline kit (.gpu-kit/, built by `python3 bench/gpu/kit/build_kit.py`) on a GPU machine with
# no network, and set the environment SGLang needs there. Meant to be sourced from the repository root:
#
#     source bench/gpu/kit/install_kit.sh
#
# It checks the kit against MANIFEST.json, installs every wheel into $GPU_SITE (default /tmp/gpu-site) without
# touching the image's packages, exports the variables below and runs an import smoke of the model code the test bed
# serves. On failure it prints why and returns (or exits, when run rather than sourced) non-zero.

_kit_sourced=0
(return 0 2>/dev/null) && _kit_sourced=1

_kit_main() {
    local repo kit
    repo="$(pwd)"
    kit="$repo/.gpu-kit"
    if [ ! -f "$kit/MANIFEST.json" ]; then
        echo "install_kit: $kit/MANIFEST.json not found; run this from the repository root after" \
             "'python3 bench/gpu/kit/build_kit.py' and carry .gpu-kit with the run" >&2
        return 1
    fi
    python3 - "$kit" <<'PY' || return 1
import hashlib, json, pathlib, sys
kit = pathlib.Path(sys.argv[1])
manifest = json.loads((kit / "MANIFEST.json").read_text())
bad = []
for f in manifest["files"]:
    p = kit / f["name"]
    if not p.is_file():
        bad.append(f"{f['name']}: missing")
    elif p.stat().st_size != f["size"] or hashlib.sha256(p.read_bytes()).hexdigest() != f["sha256"]:
        bad.append(f"{f['name']}: sha256 or size differs from MANIFEST.json")
if bad:
    sys.exit("install_kit: the kit is damaged:\n  " + "\n  ".join(bad))
print(f"install_kit: {len(manifest['files'])} wheels match MANIFEST.json (inputs {manifest['input_hash'][:12]})")
PY

    export GPU_SITE="${GPU_SITE:-/tmp/gpu-site}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$GPU_SITE" "$kit"/*.whl || { echo "install_kit: pip install into $GPU_SITE failed" >&2; return 1; }

    export PYTHONPATH="$GPU_SITE:$repo/operator:$repo/runtime"
    # The stand-in sgl_kernel reports the real version, but SGLang's check also inspects the build; skip it.
    export SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    # Multi-GPU safety on the lent machines: keep NCCL, torch symmetric memory and NVSHMEM off NVLink multicast.
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

    echo "install_kit: environment set:"
    local name
    for name in PYTHONPATH SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK HF_HUB_OFFLINE TRANSFORMERS_OFFLINE \
                NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS; do
        echo "  export $name=${!name}"
    done

    local smoke="import sglang, sgl_kernel; from sglang.srt.speculative import eagle_worker_v2; from sglang.srt.models import llama, llama_eagle3"
    if ! python3 -c "$smoke"; then
        echo "install_kit: import smoke failed: python3 -c \"$smoke\" (see the traceback above)" >&2
        return 1
    fi
    echo "install_kit: import smoke passed (sglang $(python3 -c 'import importlib.metadata as m; print(m.version("sglang"))')," \
         "sgl_kernel stand-in $(python3 -c 'import importlib.metadata as m; print(m.version("sglang-kernel"))'))"
}

if _kit_main; then
    _kit_status=0
else
    _kit_status=1
fi
unset -f _kit_main
if [ "$_kit_sourced" = 1 ]; then
    unset _kit_sourced
    return "$_kit_status"
fi
exit "$_kit_status"
