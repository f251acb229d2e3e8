#!/usr/bin/env bash
# Build the local systemd Debian 12 image that stands in for the LXC container
# (the demo target and Molecule's platform). No registry is reachable from the
# test machines, so the image is made from Debian packages with mmdebstrap.
# Rebuilt only when missing, or with --force.
set -euo pipefail

image=${SGLANG_BASE_IMAGE:-local/debian12-systemd:latest}
if [[ "${1:-}" != "--force" ]] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "base image $image present"
    exit 0
fi

# Take the mirror from this machine's own apt sources rather than naming a host.
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
if [[ -z "$mirror" ]]; then
    mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
if [[ -z "$mirror" ]]; then
    echo "no Debian mirror found in /etc/apt/sources.list(.d); set one up first" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=systemd,systemd-sysv,dbus,python3,python3-venv,python3-packaging,python3-apt,iproute2,procps,ca-certificates \
    bookworm "$work/rootfs.tar" "$mirror"
cat >"$work/Dockerfile" <<'DOCKERFILE'
FROM scratch
ADD rootfs.tar /
# Services that cannot run in a container only slow the boot down.
RUN systemctl mask systemd-udevd.service systemd-udevd-kernel.socket systemd-udevd-control.socket \
        getty.target console-getty.service systemd-logind.service \
    && rm -f /etc/machine-id && touch /etc/machine-id
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
DOCKERFILE
docker build -q -t "$image" "$work"
echo "built base image $image"
