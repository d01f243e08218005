#!/usr/bin/env bash
# Packages the specdecode-operator chart and pushes it to an OCI registry (`make release` runs it).
#
# The chart's version and appVersion are both the project's version, read from pyproject.toml's [project] version:
# one source for the Python package, the chart and the image tag the chart deploys (image.tag "" means appVersion).
# `helm package` takes the chart's crds/ along, so `helm install oci://...` installs the CRD on first install.
#
#   charts/release.sh oci://ghcr.io/specdecode/charts                 # push <version> from pyproject.toml
#   charts/release.sh oci://127.0.0.1:5000/charts --plain-http        # a registry without TLS (loopback only)
#   VERSION=0.2.0-rc.1 charts/release.sh ...                           # a pre-release of the same tree
#   CHART=path/to/chart HELM=path/to/helm OUT=dist/chart               # what to package, with what, where to
#
# Prints the pushed reference (oci://.../specdecode-operator:<version>) on stdout; helm's progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
if [ $# -lt 1 ] || [[ "$1" != oci://* ]]; then
    echo "usage: charts/release.sh oci://REGISTRY/PATH [helm push flags, e.g. --plain-http]" >&2
    exit 2
fi
registry="${1%/}"
shift
chart="${CHART:-$here/specdecode-operator}"
out="${OUT:-$root/dist/chart}"
version="${VERSION:-$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml" | head -n1)}"
# SemVer 2 as Helm requires it (an OCI tag cannot hold '+': Helm writes it as '_')
if ! [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
    echo "charts/release.sh: version '$version' is not MAJOR.MINOR.PATCH[-PRERELEASE]" >&2
    exit 2
fi
[ -d "$chart/crds" ] && ls "$chart"/crds/*.yaml >/dev/null 2>&1 || {
    echo "charts/release.sh: $chart/crds/ holds no CRD; the release must carry it" >&2
    exit 2
}

helm="${HELM:-$("$root/envtest/fetch-tools.sh")/helm}"
mkdir -p "$out"
package="$out/$(basename "$chart")-$version.tgz"
rm -f "$package"
"$helm" lint --strict "$chart" >&2
"$helm" package "$chart" --version "$version" --app-version "$version" --destination "$out" >&2
# the package must carry every CRD of the chart, byte for byte
for crd in "$chart"/crds/*.yaml; do
    tar -xzOf "$package" "$(basename "$chart")/crds/$(basename "$crd")" | cmp -s - "$crd" || {
        echo "charts/release.sh: $package lacks $(basename "$crd") as it is in $chart/crds/" >&2
        exit 1
    }
done
"$helm" push "$package" "$registry" "$@" >&2
echo "$registry/$(basename "$chart"):$version"
