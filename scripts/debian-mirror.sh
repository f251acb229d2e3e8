#!/usr/bin/env bash
# Print this machine's Debian mirror, taken from its own apt sources rather than naming a host
# (scripts/build-base-image.sh and scripts/build-controller-image.sh make their roots from it).
set -euo pipefail
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
if [[ -z "$mirror" ]]; then
    mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
if [[ -z "$mirror" ]]; then
    echo "no Debian mirror found in /etc/apt/sources.list(.d); set one up first" >&2
    exit 1
fi
echo "$mirror"
