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

mirror=$("$(dirname "$0")/debian-mirror.sh")

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
