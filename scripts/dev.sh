#!/usr/bin/env bash
# The project's commands, one place (README's commands call this):
#   scripts/dev.sh demo    run site.yml on the embedded default target (a local LXC container)
#   scripts/dev.sh test    yamllint, ansible-lint, Molecule, pytest
#   scripts/dev.sh lint    the linters alone
#   scripts/dev.sh setup   install what the others need (Debian packages, .venv, images)
#   scripts/dev.sh controller-tests   the playbook-level tests on a Debian 13 controller (ansible-core 2.21)
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

    # The Docker engine and the base image (mmdebstrap and docker build, about 28 s on a fresh
    # 2-core machine, mostly waiting on the mirror) come up while the .venv is made (about 18 s).
    local images_log images_pid images_rc=0
    images_log=$(mktemp)
    log "starting the Docker engine when it is down and building the base image when it is missing, beside the .venv"
    { scripts/docker-engine.sh && scripts/build-base-image.sh; } >"$images_log" 2>&1 &
    images_pid=$!

    local stamp="$venv/.requirements.sha256"
    local want
    want=$(sha256sum requirements.txt | cut -d' ' -f1)
    if [[ ! -x "$venv/bin/ansible-playbook" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        log "creating $venv from requirements.txt"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --upgrade pip
        # --no-compile: Python writes the bytecode of what it imports, on first import. Compiling
        # all of the ansible package's collections at install made this step 46 s (35 CPU-s) on a
        # fresh 2-core machine, 15 s without (measured 2026-12-06).
        "$venv/bin/pip" install --quiet --no-compile -r requirements.txt
        echo "$want" >"$stamp"
    fi
    link_lxc_bindings
    # shellcheck disable=SC1091
    source "$venv/bin/activate"
    ansible-galaxy collection install -r requirements.yml >/dev/null

    wait "$images_pid" || images_rc=$?
    cat "$images_log"
    rm -f "$images_log"
    if ((images_rc)); then
        log "the Docker engine or the base image failed (exit $images_rc): see above"
        return "$images_rc"
    fi
    [[ "${1:-}" == --no-controller-image ]] || scripts/build-controller-image.sh
}

# The playbook-level tests that cover each playbook's way in, on the controller of Debian 13 (Python
# 3.13, so ansible-core 2.21 by requirements.txt's markers) in a container of
# scripts/build-controller-image.sh: a fresh .venv from requirements.txt, the tree copied in (never
# written), a copy of this machine's wheel cache (so that no Python 3.13 wheel lands in it), and
# as on every controller, a run that prints a deprecation warning fails (tests/conftest.py's run_playbook).
# pip's --no-compile there: the container's Python writes the bytecode of what it imports (about 20 CPU-s
# less than compiling all of ansible's collections at install, measured on Python 3.11).
controller_test_files=(test_playbook_validate.py test_playbook_secrets.py test_playbook_install_input.py
    test_playbook_gpu_host_input.py test_playbook_container_input.py test_playbook_nvidia_userspace.py
    test_playbook_answers.py test_playbook_bench_key.py test_playbook_bench_report_input.py
    test_model_preflight.py)
controller_tests() {
    local image=${SGLANG_CONTROLLER_IMAGE:-local/debian13-controller:latest}
    local cache=${SGLANG_WHEEL_CACHE:-$HOME/.cache/sglang-deploy/wheels}
    mkdir -p "$cache" "$HOME/.cache/pip"
    # SYS_ADMIN: the read-only-target tests bind-mount inside the container's own mount namespace.
    # This machine's CA bundle (Debian's, with any local CA that update-ca-certificates added): the
    # container's pip trusts what this machine's does.
    docker run --rm --network host --cap-add SYS_ADMIN --security-opt apparmor=unconfined \
        --security-opt seccomp=unconfined -v "$repo:/src:ro" -v "$cache:/host-wheels:ro" \
        -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/host-ca.crt:ro -e PIP_CERT=/etc/ssl/host-ca.crt \
        -e SSL_CERT_FILE=/etc/ssl/host-ca.crt -v "$HOME/.cache/pip:/root/.cache/pip" "$image" bash -euo pipefail -c '
        mkdir -p /repo /root/.cache/sglang-deploy
        tar -C /src --exclude=./.venv --exclude=./.git -cf - . | tar -C /repo -xf -
        cp -a /host-wheels /root/.cache/sglang-deploy/wheels
        cd /repo
        python3 -m venv .venv
        .venv/bin/pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt
        . .venv/bin/activate
        python --version
        ansible --version | head -n 1
        python -m pytest -p no:cacheprovider -q -rs -W ignore::DeprecationWarning "${@/#/tests/}"
    ' controller-tests "${controller_test_files[@]}"
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

# pytest on all of tests/, its output to the terminal and to the log $1 as well.
run_pytest() {
    local log_file=$1
    shift
    python -m pytest tests -n 2 --dist loadfile --no-loadscope-reorder --durations=15 -rfE "$@" \
        2>&1 | tee "$log_file"
}

# What runs beside pytest, one after another (one stream): ansible-lint, Molecule's scenarios, then
# the Debian 13 controller's image and tests. Each one's output goes to its own log in $2 and its
# time and exit status to $1 ("SECONDS RC NAME" lines), printed by the caller after pytest's.
beside_pytest() {
    local times=$1 logs=$2
    # ansible-lint's and Molecule's runs on this machine use the tests' run caches as pytest's do
    # (tests/conftest.py; the targets' image has the compile cache built in): tests/run_caches/.
    export PYTHONPATH=$repo/tests/run_caches${PYTHONPATH:+:$PYTHONPATH}
    timed() {   # timed NAME LOG COMMAND...
        local name=$1 out=$2 started=$SECONDS rc=0
        shift 2
        "$@" >"$logs/$out" 2>&1 || rc=$?
        echo "$((SECONDS - started)) $rc $name" >>"$times"
    }
    timed "ansible-lint (production profile)" ansible-lint.log ansible-lint --strict
    timed "molecule (all scenarios)" molecule.log molecule_scenarios "$logs/molecule-times"
    timed "playbook-level tests on Debian 13 (ansible-core 2.21)" controller.log controller_image_and_tests
}

controller_image_and_tests() {
    scripts/build-controller-image.sh && controller_tests
}

tests() {
    stage "yamllint" yamllint --strict .
    # CI is CPU-bound on two cores. pytest's two workers are two streams; what runs beside them
    # (ansible-lint, Molecule, the Debian 13 controller) is one more, in sequence, which fills the
    # cores while a worker waits (the fleet's drains, a server's readiness) without the cost of
    # more streams: measured on this 2-core machine (2026-12-07), the same playbook run four or six
    # at a time cost 7 to 25% more CPU-s per run than two at a time, and CI's processes used about
    # 2880 CPU-s with five streams against about 2380 for the same work measured stage by stage.
    local logs beside_pid beside_rc=0 pytest_rc=0 started=$SECONDS
    logs=$(mktemp -d /tmp/ci-logs-XXXXXX)
    : >"$logs/times"
    : >"$logs/molecule-times"
    log "beside pytest, one after another: ansible-lint, Molecule (all scenarios), the playbook-level tests on the Debian 13 controller (ansible-core 2.21); output in $logs"
    beside_pytest "$logs/times" "$logs" &
    beside_pid=$!
    # Files in tests/conftest.py's order (the costliest first, the fleet leading), not xdist's by test count.
    # pytest's output is also kept in a log: its failures are printed again at the very end, where
    # a reader of only the tail of CI's output (the others' logs come after pytest's) still finds them.
    stage "pytest" run_pytest "$logs/pytest.log" "$@" || pytest_rc=$?
    wait "$beside_pid" || beside_rc=$?
    local failed=() seconds name rc line
    for name in ansible-lint molecule controller; do
        log "$name's output"
        cat "$logs/$name.log" 2>/dev/null || true
    done
    while read -r seconds rc name; do
        stage_times+=("$(printf '%4d s  %s' "$seconds" "$name")")
        ((rc == 0)) || failed+=("$name (exit $rc)")
    done <"$logs/times"
    while read -r line; do stage_times+=("  $line"); done <"$logs/molecule-times"
    stage_times+=("$(printf '%4d s  %s' $((SECONDS - started)) "all of the above, together")")
    print_stage_times
    # A stage that never wrote its line did not finish.
    if ((beside_rc != 0 || $(wc -l <"$logs/times") != 3)); then failed+=("the stages beside pytest (exit $beside_rc)"); fi
    for name in "${failed[@]}"; do log "failed: $name"; done
    if ((pytest_rc)); then
        log "pytest's failures (again: their first assertion lines, then the short summary)"
        grep -E '^(_{3,} .* _{3,}|E  )' "$logs/pytest.log" | head -n 40 | cut -c1-300 || true
        sed -n '/short test summary info/,$p' "$logs/pytest.log" | cut -c1-600
        log "pytest failed (exit $pytest_rc)"
    fi
    rm -rf "$logs"
    ((${#failed[@]} == 0 && !pytest_rc))
}

command=${1:-}
shift || true
case "$command" in
    setup) setup ;;
    lint) setup; lint ;;
    demo) setup; demo "$@" ;;
    fleet) setup; fleet "$@" ;;
    fleet-roll) activate; fleet_roll "$@" ;;
    controller-tests) setup; controller_tests ;;
    test)
        stage "setup" setup --no-controller-image
        activate
        tests "$@"
        ;;
    *)
        sed -n '2,9p' "$0" >&2
        exit 2
        ;;
esac
