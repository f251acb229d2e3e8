#!/usr/bin/env bash
# Build a Debian 13 (trixie) controller image: the Python 3.13 that Proxmox VE 9's base ships,
# on which requirements.txt selects ansible-core 2.21. scripts/dev.sh test runs the playbook-level
# tests in it (controller_tests), beside the same tests on this machine's Python 3.11 and 2.19.
# Made with mmdebstrap from Debian's packages, as the base image is. Rebuilt only when missing,
# or with --force. systemd and iproute2 are installed, not run: the roles' checks call
# systemd-analyze (units verified before they replace the old ones) and ip on the controller too.
set -euo pipefail

image=${SGLANG_CONTROLLER_IMAGE:-local/debian13-controller:latest}
if [[ "${1:-}" != "--force" ]] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "controller image $image present"
    exit 0
fi

mirror=$("$(dirname "$0")/debian-mirror.sh")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=python3,python3-venv,git,ca-certificates,procps,openssh-client,systemd,iproute2 \
    trixie "$work/rootfs.tar" "$mirror"
cat >"$work/Dockerfile" <<'DOCKERFILE'
FROM scratch
ADD rootfs.tar /
CMD ["/bin/bash"]
DOCKERFILE
docker build -q -t "$image" "$work"
echo "built controller image $image"
