#!/usr/bin/env bash
# The project's commands, one place (README's commands call this):
#   scripts/dev.sh demo    run site.yml on the embedded default target (a local LXC container)
#   scripts/dev.sh test    yamllint, ansible-lint, Molecule, pytest
#   scripts/dev.sh lint    the linters alone
#   scripts/dev.sh setup   install what the others need (Debian packages, .venv, image)
#   scripts/dev.sh fleet   three stand-in replicas and the smg gateway (127.0.0.1:30000) in Docker
#   scripts/dev.sh fleet-roll [ansible args]   roll them with traffic flowing (-e sglang_version=0.5.23)
# Runs as root on a Debian machine with Python 3.11 or later.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
venv="$repo/.venv"
export CI_STARTED_AT=${CI_STARTED_AT:-$(date +%s)}
export ANSIBLE_CONFIG="$repo/ansible.cfg"
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}

log() { printf '==> %s\n' "$*"; }

# Each stage's wall time, printed as it ends and again as a table at the end,
# so that a slow stage shows.
stage_times=()
stage() {
    local name=$1 started=$SECONDS rc=0
    shift
    log "$name"
    "$@" || rc=$?
    stage_times+=("$(printf '%4d s  %s' $((SECONDS - started)) "$name")")
    log "$name took $((SECONDS - started)) s"
    return "$rc"
}
print_stage_times() {
    log "stage times"
    printf '    %s\n' "${stage_times[@]}"
}

apt_install() {
    local missing=()
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        log "installing Debian packages: ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# A plain LXC container reached through community.general.lxc (the
# lxc_container role's lxc connection; the demo uses ssh) needs Debian's
# python3-lxc bindings: expose just those to the .venv (same Python, so the
# same ABI) rather than all of the system's packages.
link_lxc_bindings() {
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    mkdir -p "$venv/debian-lxc"
    ln -sfn /usr/lib/python3/dist-packages/lxc "$venv/debian-lxc/lxc"
    ln -sfn "$(ls /usr/lib/python3/dist-packages/_lxc.cpython-*.so | head -n 1)" "$venv/debian-lxc/"
    echo "$venv/debian-lxc" >"$site/debian-lxc.pth"
}

setup() {
    local packages=(docker.io mmdebstrap lxc python3-lxc debootstrap)
    python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null \
        || packages+=(python3-venv)
    apt_install "${packages[@]}"

    local stamp="$venv/.requirements.sha256"
    local want
    want=$(sha256sum requirements.txt | cut -d' ' -f1)
    if [[ ! -x "$venv/bin/ansible-playbook" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        log "creating $venv from requirements.txt"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --upgrade pip
        "$venv/bin/pip" install --quiet -r requirements.txt
        echo "$want" >"$stamp"
    fi
    link_lxc_bindings
    # shellcheck disable=SC1091
    source "$venv/bin/activate"
    ansible-galaxy collection install -r requirements.yml >/dev/null

    log "starting the Docker engine when it is down"
    scripts/docker-engine.sh
    scripts/build-base-image.sh
}

activate() {
    # shellcheck disable=SC1091
    source "$venv/bin/activate"
}

lint() {
    log "yamllint"
    yamllint --strict .
    log "ansible-lint (production profile)"
    ansible-lint --strict
}

demo() {
    log "creating the demo LXC container (sglang-demo) and giving it the SGLang wheels"
    ansible-playbook -i inventory/local playbooks/demo_target.yml
    log "running site.yml on the embedded default target"
    ansible-playbook -i inventory/local site.yml "$@"
}

# The fleet in Docker containers on this machine (inventory/fleet): LXC would
# cost a minute per container to create and Docker's systemd image is already
# here for Molecule.
fleet() {
    log "starting the fleet's containers and giving them the stand-in wheels"
    ansible-playbook -i inventory/fleet playbooks/demo_fleet.yml
    log "deploying three stand-in replicas and the gateway (playbooks/fleet.yml)"
    ansible-playbook -i inventory/fleet playbooks/fleet.yml "$@"
    log "the gateway answers on http://127.0.0.1:30000 (stand-in replicas), e.g.:"
    echo "    curl -s http://127.0.0.1:30000/v1/completions -H 'Content-Type: application/json' \\"
    echo "         -d '{\"model\": \"glm-5\", \"prompt\": \"hi\", \"max_tokens\": 8}'"
}

# The rolling upgrade with a request loop through the gateway; fails when the
# roll fails or when any request failed.
fleet_roll() {
    local traffic rc=0 traffic_rc=0 started=$SECONDS
    python3 scripts/fleet-traffic.py "http://127.0.0.1:30000" &
    traffic=$!
    ansible-playbook -i inventory/fleet playbooks/rolling_upgrade.yml "$@" || rc=$?
    kill -TERM "$traffic"
    wait "$traffic" || traffic_rc=$?
    if ((rc == 0)); then rc=$traffic_rc; fi
    log "roll took $((SECONDS - started)) s (exit $rc)"
    return "$rc"
}

# Molecule's scenarios, one after another; each one's time goes to $1.
molecule_scenarios() {
    local times=$1 scenario started
    for scenario in molecule/*/molecule.yml; do
        scenario=$(basename "$(dirname "$scenario")")
        started=$SECONDS
        log "molecule $scenario"
        molecule test -s "$scenario" || return 1
        printf '%4d s  molecule %s\n' $((SECONDS - started)) "$scenario" >>"$times"
    done
}

tests() {
    stage "yamllint" yamllint --strict .
    stage "ansible-lint (production profile)" ansible-lint --strict
    # Molecule runs beside pytest: a scenario is one Ansible run at a time and leaves most of a
    # core idle (measured on 2 cores: 45% idle during Molecule alone). Measured once: 1561 s for
    # the two together against 657 + 950 s one after the other in an earlier session, a small
    # gain. Molecule's output goes to a log that is printed after pytest.
    local molecule_log molecule_times molecule_pid molecule_rc=0 pytest_rc=0 started=$SECONDS
    molecule_log=$(mktemp /tmp/molecule-XXXXXX.log)
    molecule_times=$(mktemp /tmp/molecule-times-XXXXXX)
    log "molecule (all scenarios, beside pytest; output in $molecule_log)"
    molecule_scenarios "$molecule_times" >"$molecule_log" 2>&1 &
    molecule_pid=$!
    # Files in tests/conftest.py's order (the end-to-end fleet file first), not xdist's by test count.
    stage "pytest" python -m pytest tests -n 2 --dist loadfile --no-loadscope-reorder --durations=15 "$@" \
        || pytest_rc=$?
    wait "$molecule_pid" || molecule_rc=$?
    log "molecule's output"
    cat "$molecule_log"
    while read -r line; do stage_times+=("$line"); done <"$molecule_times"
    stage_times+=("$(printf '%4d s  %s' $((SECONDS - started)) "pytest and molecule, together")")
    rm -f "$molecule_log" "$molecule_times"
    print_stage_times
    if ((molecule_rc)); then log "molecule failed (exit $molecule_rc)"; fi
    if ((pytest_rc)); then log "pytest failed (exit $pytest_rc)"; fi
    ((!molecule_rc && !pytest_rc))
}

command=${1:-}
shift || true
case "$command" in
    setup) setup ;;
    lint) setup; lint ;;
    demo) setup; demo "$@" ;;
    fleet) setup; fleet "$@" ;;
    fleet-roll) activate; fleet_roll "$@" ;;
    test)
        stage "setup" setup
        activate
        tests "$@"
        ;;
    *)
        sed -n '2,9p' "$0" >&2
        exit 2
        ;;
esac
