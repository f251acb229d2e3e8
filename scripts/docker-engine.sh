#!/usr/bin/env bash
# Ensure a Docker engine answers on this machine. Nothing starts dockerd on the
# test machines (no systemd as PID 1), so start it ourselves when it is down.
set -euo pipefail

if docker info >/dev/null 2>&1; then
    exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
    echo "dockerd not found: install Debian's docker.io (scripts/dev.sh setup does)" >&2
    exit 1
fi
log=/var/log/dockerd-sglang-deploy.log
setsid dockerd >"$log" 2>&1 < /dev/null &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 0.5
done
echo "dockerd did not answer within 30 s; its log: $log" >&2
tail -n 20 "$log" >&2
exit 1
