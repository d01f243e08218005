#!/usr/bin/env bash
# Builds promtool at the version pinned in go.mod (the `tool` directive) into a cache outside the repository and
# prints the directory that holds it. The cache key is a hash of go.mod, go.sum and this script, so a machine that
# built it before reuses the binary and a version bump builds once into a new directory.
#
#   tools/promtool/build.sh                  -> prints e.g. ~/.cache/specdecode/promtool/3f2a…/bin
#   SPECDECODE_CACHE=/x build.sh             -> cache under /x/promtool
#   SPECDECODE_PROMTOOL_NO_BUILD=1 build.sh  -> exit 3 instead of building (test runs: a build outlasts a test timeout)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${SPECDECODE_CACHE:-$HOME/.cache/specdecode}/promtool"
key="$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-16)"
bin="$cache_root/$key/bin"

if [ -x "$bin/promtool" ]; then
    echo "$bin"
    exit 0
fi

if [ -n "${SPECDECODE_PROMTOOL_NO_BUILD:-}" ]; then
    echo "tools/promtool/build.sh: promtool is not built yet for this go.mod; run: make promtool" >&2
    exit 3
fi

if ! command -v go >/dev/null 2>&1; then
    echo "tools/promtool/build.sh: no 'go' on PATH; promtool is built from Go modules (Go >= 1.26)" >&2
    exit 2
fi

mkdir -p "$cache_root"
# One build at a time per cache key: a second caller waits, then finds the binary.
exec 9>"$cache_root/$key.lock"
flock 9
if [ -x "$bin/promtool" ]; then
    echo "$bin"
    exit 0
fi

tmp="$(mktemp -d "$cache_root/$key.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "promtool: building into $bin (first build takes a few minutes)" >&2
(
    cd "$here"
    export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
    go build -ldflags='-s -w' -o "$tmp/promtool" github.com/prometheus/prometheus/cmd/promtool
)
mkdir -p "$(dirname "$bin")"
rm -rf "$bin"
chmod 755 "$tmp"
mv "$tmp" "$bin"
trap - EXIT
echo "promtool: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
