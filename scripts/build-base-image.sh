#!/usr/bin/env bash
# Build the local systemd Debian 12 image that stands in for the LXC container
# (the demo target and Molecule's platform). No registry is reachable from the
# test machines, so the image is made from Debian packages with mmdebstrap.
# Rebuilt when missing, when tests/run_caches/zipimport_code_cache.py changed (the image's
# label holds its sha256), or with --force.
#
# The image's system Python loads that module at start-up (a .pth file): every module run there
# compiles AnsiballZ's sources once per container instead of once per task (see the module; about
# 0.13 CPU-s less a module run). A test image only: production targets and the demo's LXC container
# have no such thing, and scripts/bench-deploy.py measures the demo.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
image=${SGLANG_BASE_IMAGE:-local/debian12-systemd:latest}
hook=$repo/tests/run_caches/zipimport_code_cache.py
hook_sha=$(sha256sum "$hook" | cut -d' ' -f1)
if [[ "${1:-}" != "--force" ]] && [[ "$(docker image inspect "$image" \
        --format '{{ index .Config.Labels "sglang-deploy.zipimport-code-cache" }}' 2>/dev/null)" == "$hook_sha" ]]; then
    echo "base image $image present"
    exit 0
fi

mirror=$("$(dirname "$0")/debian-mirror.sh")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=systemd,systemd-sysv,dbus,python3,python3-venv,python3-packaging,python3-apt,iproute2,procps,ca-certificates \
    bookworm "$work/rootfs.tar" "$mirror"
cp "$hook" "$work/"
echo 'import zipimport_code_cache; zipimport_code_cache.install("/var/cache/zipimport-code")' \
    >"$work/zipimport_code_cache.pth"
cat >"$work/Dockerfile" <<DOCKERFILE
FROM scratch
ADD rootfs.tar /
COPY zipimport_code_cache.py zipimport_code_cache.pth /usr/local/lib/python3.11/dist-packages/
LABEL sglang-deploy.zipimport-code-cache=$hook_sha
# Services that cannot run in a container only slow the boot down.
RUN systemctl mask systemd-udevd.service systemd-udevd-kernel.socket systemd-udevd-control.socket \
        getty.target console-getty.service systemd-logind.service \
    && rm -f /etc/machine-id && touch /etc/machine-id
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
DOCKERFILE
docker build -q -t "$image" "$work"
echo "built base image $image"
