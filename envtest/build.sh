#!/usr/bin/env bash
# Builds kube-apiserver and etcd at the versions pinned in go.mod into a cache outside the repository and prints the
# directory that holds them. The cache key is a hash of go.mod, go.sum, the etcd main and this script, so a fresh clone on a
# machine that built them before reuses the binaries, and a version bump builds once into a new directory.
#
#   envtest/build.sh            -> prints e.g. ~/.cache/specdecode/envtest/3f2a…/bin
#   SPECDECODE_CACHE=/x build.sh  -> cache under /x/envtest
#   SPECDECODE_ENVTEST_NO_BUILD=1 build.sh -> exit 3 instead of building (test runs: a build outlasts a test timeout)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${SPECDECODE_CACHE:-$HOME/.cache/specdecode}/envtest"
key="$(cat "$here/go.mod" "$here/go.sum" "$here/cmd/etcd/main.go" "$here/build.sh" | sha256sum | cut -c1-16)"
bin="$cache_root/$key/bin"

have_all() { [ -x "$bin/kube-apiserver" ] && [ -x "$bin/etcd" ]; }

if have_all; then
    echo "$bin"
    exit 0
fi

if [ -n "${SPECDECODE_ENVTEST_NO_BUILD:-}" ]; then
    echo "envtest/build.sh: kube-apiserver and etcd are not built yet for this go.mod; run: make envtest" >&2
    exit 3
fi

if ! command -v go >/dev/null 2>&1; then
    echo "envtest/build.sh: no 'go' on PATH; kube-apiserver and etcd are built from Go modules (Go >= 1.26)" >&2
    exit 2
fi

mkdir -p "$cache_root"
# One build at a time per cache key: a second caller waits, then finds the binaries.
exec 9>"$cache_root/$key.lock"
flock 9
if have_all; then
    echo "$bin"
    exit 0
fi

tmp="$(mktemp -d "$cache_root/$key.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "envtest: building kube-apiserver and etcd into $bin (first build takes several minutes)" >&2
(
    cd "$here"
    export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
    # /version must say what was built (kubectl and helm read it; helm checks charts' kubeVersion against it),
    # as Kubernetes' own release builds stamp it.
    kv="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
    minor="$(echo "$kv" | cut -d. -f2)"
    pkg=k8s.io/component-base/version
    stamp="-X $pkg.gitVersion=$kv -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    stamp="$stamp -X $pkg.buildDate=1970-01-01T00:00:00Z"
    go build -ldflags="-s -w $stamp" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
    go build -ldflags='-s -w' -o "$tmp/etcd" ./cmd/etcd
)
mkdir -p "$(dirname "$bin")"
rm -rf "$bin"
chmod 755 "$tmp"
mv "$tmp" "$bin"
trap - EXIT
echo "envtest: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
