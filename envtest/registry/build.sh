#!/usr/bin/env bash
# Builds the CNCF distribution registry (the reference OCI registry) at the version pinned in go.mod into a cache
# outside the repository and prints the directory that holds it. The chart release (`make release`) is pushed to it
# on loopback and installed from it with `helm install oci://...` in the tests, as a user installs from any registry.
# The cache key is a hash of go.mod, go.sum, the main and this script, as for kube-apiserver (envtest/build.sh): a
# machine that built it before reuses the binary; a version bump builds once into a new directory.
#
#   envtest/registry/build.sh                 -> prints e.g. ~/.cache/specdecode/registry/3f2a…/bin
#   SPECDECODE_CACHE=/x build.sh              -> cache under /x/registry
#   SPECDECODE_REGISTRY_NO_BUILD=1 build.sh   -> exit 3 instead of building (test runs: a build outlasts a test timeout)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${SPECDECODE_CACHE:-$HOME/.cache/specdecode}/registry"
key="$(cat "$here/go.mod" "$here/go.sum" "$here/cmd/registry/main.go" "$here/build.sh" | sha256sum | cut -c1-16)"
bin="$cache_root/$key/bin"

if [ -x "$bin/registry" ]; then
    echo "$bin"
    exit 0
fi

if [ -n "${SPECDECODE_REGISTRY_NO_BUILD:-}" ]; then
    echo "envtest/registry/build.sh: the registry is not built yet for this go.mod; run: make registry" >&2
    exit 3
fi

if ! command -v go >/dev/null 2>&1; then
    echo "envtest/registry/build.sh: no 'go' on PATH; the registry is built from Go modules (Go >= 1.26)" >&2
    exit 2
fi

mkdir -p "$cache_root"
# One build at a time per cache key: a second caller waits, then finds the binary.
exec 9>"$cache_root/$key.lock"
flock 9
if [ -x "$bin/registry" ]; then
    echo "$bin"
    exit 0
fi

tmp="$(mktemp -d "$cache_root/$key.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "registry: building the distribution registry into $bin (the first build takes a few minutes)" >&2
(
    cd "$here"
    export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
    # the version it reports (`registry --version`) is the module's, as its release builds stamp it
    v="$(go list -m -f '{{.Version}}' github.com/distribution/distribution/v3)"
    go build -ldflags="-s -w -X github.com/distribution/distribution/v3/version.version=$v" \
        -o "$tmp/registry" ./cmd/registry
)
mkdir -p "$(dirname "$bin")"
rm -rf "$bin"
chmod 755 "$tmp"
mv "$tmp" "$bin"
trap - EXIT
echo "registry: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
