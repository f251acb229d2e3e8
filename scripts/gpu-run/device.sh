#!/bin/bash
# The GPU run, on the lent H200 (docs/testing.md, "The real server on a lent GPU"):
#   bash .gpu/tree/scripts/gpu-run/device.sh serve   # 1st call: install, the unit's server, answers, bench
#   bash .gpu/tree/scripts/gpu-run/device.sh gates   # 2nd call, machine still warm: the autotune gate states
# .gpu/ is what scripts/gpu-run/pack.sh put into the checkout that travels: payload/ (the
# slimmed SGLang 0.5.16 site, Ansible, the tiny model, in parts) and tree/ (this project).
# Everything it saw goes to $OUT/<phase>.tgz and $OUT/<phase>-summary.txt.
set -u
PHASE=$1
G=$(pwd)/.gpu
T=$G/tree
W=/tmp/gpu-run
R=$W/$PHASE
SITE=/opt/sgl/lib/python3.12/site-packages
PY=/opt/sgl/bin/python
BASE_PY=$(command -v python3)
URL=http://127.0.0.1:30000
KEY=gpu-run-key-0123456789
mkdir -p "$R"
SUMMARY=$R/summary.txt
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# What the role's environment file would give the server (sglang_server_environment + NCCL).
export CUDA_DEVICE_ORDER=PCI_BUS_ID SGLANG_CACHE_DIR=$W/cache NCCL_IB_DISABLE=1 NCCL_P2P_LEVEL=SYS
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$SUMMARY"; }
# A call may run 600 s: every step's timeout is cut to what is left of ${GPU_RUN_BUDGET:-540} s,
# so the results are packed into $OUT before the call's limit.
cap() { local left=$(( T0 + ${GPU_RUN_BUDGET:-540} - $(date +%s) - 15 )); [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"; }

setup() {
  [ -x $PY ] && { say "setup: already installed"; return; }
  mkdir -p $SITE /opt/sgl/bin $W/ans /etc/sglang
  (cd $G/payload && sha256sum -c SHA256SUMS) >> "$SUMMARY" 2>&1 || { say "payload sha256 mismatch"; exit 1; }
  cat $G/payload/site.tar.xz.part-* | xz -dc -T0 | tar -C $SITE -xf - || { say "untar failed"; exit 1; }
  xz -dc $G/payload/extra.tar.xz | tar -C $W -xf -   # ans/
  # The device image's python3 (torch 2.11.0+cu130, which 0.5.16 pins) runs SGLang with the
  # payload first on sys.path: /opt/sgl is laid out as a virtualenv (lib/python3.12/site-packages),
  # which is where the roles look for dist-info (RECORD, flashinfer_python's version).
  printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' $SITE "$BASE_PY" > $PY
  chmod 755 $PY
  # The API key file the role writes for --config (sglang_unit.config_file_text: JSON is YAML).
  printf '{"api-key": "%s"}\n' $KEY > /etc/sglang/sglang.secrets.yaml
  chmod 600 /etc/sglang/sglang.secrets.yaml
  $PY $T/scripts/gpu-run/make_tiny_moe.py $W/tinymoe > $R/model.txt 2>&1 || { say "model: $(tail -3 $R/model.txt)"; exit 1; }
  { nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
    $BASE_PY --version; $PY -c 'import torch, sglang, flashinfer, sgl_kernel; print("torch", torch.__version__, "sglang", sglang.__version__, "flashinfer", flashinfer.__version__, "sgl_kernel", sgl_kernel.__version__)'
  } > $R/env.txt 2>&1
  say "setup done: $(tail -1 $R/env.txt)"
}

play() {  # play NAME ARGS...: autotune.yml + validate.yml on this machine, unit to $R/NAME.service
  local name=$1; shift
  (cd $T && PYTHONPATH=$W/ans ANSIBLE_CONFIG=$T/ansible.cfg ANSIBLE_LOCAL_TEMP=$W/ansible-tmp \
    $BASE_PY -m ansible.cli.playbook -i localhost, -c local -e ansible_python_interpreter=$BASE_PY \
    -e @scripts/gpu-run/tiny.yml playbooks/autotune.yml playbooks/validate.yml \
    -e sglang_server_unit_out=$R/$name.service "$@") > $R/$name.ansible.txt 2>&1
  local rc=$?
  say "play $name rc=$rc $(grep -o 'Proof: [^"]*' $R/$name.ansible.txt | head -1 | cut -c1-160)"
}

gate_state() {  # the gate file's sha256 against RECORD's, and its entry line
  $BASE_PY - $SITE <<'EOF'
import base64, glob, hashlib, pathlib, sys
site = pathlib.Path(sys.argv[1])
rel = "sglang/srt/model_executor/runner/flashinfer_autotune.py"
data = (site / rel).read_bytes()
record = next(l for l in pathlib.Path(glob.glob(f"{site}/sglang-*.dist-info/RECORD")[0]).read_text().splitlines()
              if l.startswith(rel + ","))
now = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
line = next(l for l in data.decode().splitlines() if '"flashinfer_cutlass",' in l)
print(f"gate {'== RECORD' if record.split(',')[1] == now else '!= RECORD'} ({now[:20]}...); entry line {line.strip()!r}")
EOF
}

launch() {  # launch NAME ARGS...: the unit's ExecStart under launch_unit.py, log in $R/NAME.log
  local name=$1; shift
  $PY $T/scripts/gpu-run/launch_unit.py $R/$name.service $R/$name.log "$@" > $R/$name.launch.json 2>&1
  say "launch $name: $(grep -o '"why": "[a-z]*"[^}]*' $R/$name.launch.json | cut -c1-160)"
  grep -n "FlashInfer autotune\|Uvicorn running\|fired up\|Traceback\|Error" $R/$name.log | cut -c1-300 | head -8 >> "$SUMMARY"
}

serve() {
  setup
  play serve -e autotune=false -e '{"sglang_server_extra_flags": {"quantization": null, "mem-fraction-static": 0.3, "attention-backend": "triton", "moe-runner-backend": null}}'
  launch serve --ready $URL/health_generate --timeout $(cap 300) --keep
  for path in /health /health_generate /v1/models; do
    say "GET $path without key: $(curl -s -o /dev/null -w '%{http_code}' -m 30 $URL$path), with key: $(curl -s -o /dev/null -w '%{http_code}' -m 30 -H "Authorization: Bearer $KEY" $URL$path)"
  done
  curl -s -m 10 -H "Authorization: Bearer $KEY" $URL/server_info > $R/server_info.json
  # Raw greedy completions of the shipped prompts, at several concurrencies (drift calibration).
  timeout $(cap 200) $PY $T/scripts/gpu-run/raw_answers.py $URL $KEY $T/roles/sglang_answers/files/prompts.json $R/raw 8 32 32 96 >> "$SUMMARY" 2>&1
  local rc=$?
  say "raw answers rc=$rc"
  if [ -f $T/playbooks/answers.yml ]; then
    for c in 8 32; do
      (cd $T && PYTHONPATH=$W/ans ANSIBLE_CONFIG=$T/ansible.cfg timeout $(cap 120) $BASE_PY -m ansible.cli.playbook -v -i localhost, -c local \
        playbooks/answers.yml -e sglang_answers_url=$URL -e sglang_server_api_key=$KEY -e sglang_answers_must_pass=false \
        -e sglang_answers_concurrency=$c -e sglang_answers_record=$R/answers-record-c$c.json) > $R/answers-c$c.txt 2>&1
      rc=$?
      say "answers.yml c=$c rc=$rc $(grep -A1 '^    msg:' $R/answers-c$c.txt | tail -2 | tr -d '\n' | cut -c1-220)"
    done
  fi
  bench() {  # bench NAME: playbooks/bench.yml on this machine, small levels, runs under $R/bench-NAME
    (cd $T && PYTHONPATH=$W/ans ANSIBLE_CONFIG=$T/ansible.cfg timeout $(cap 150) $BASE_PY -m ansible.cli.playbook -i localhost, -c local \
      -e ansible_python_interpreter=$BASE_PY playbooks/bench.yml -e @scripts/gpu-run/tiny.yml \
      -e sglang_bench_python=$PY -e sglang_bench_package_dir=$SITE/sglang \
      -e '{"sglang_bench_concurrencies": [4, 16]}' -e sglang_bench_input_len=128 -e sglang_bench_output_len=64 \
      -e sglang_bench_runs_dir=$R/bench-$1 -e sglang_bench_remote_dir=$W/bench-scratch-$1) > $R/bench-$1.txt 2>&1
    local rc=$?
    say "bench.yml ($1) rc=$rc $(find $R/bench-$1 -name results.jsonl -size +0 | head -1)"
  }
  bench nokey
  OPENAI_API_KEY=$KEY bench key
  say "server still up: $(curl -s -o /dev/null -w '%{http_code}' -m 5 $URL/health)"
  kill -TERM -- -"$(cat $R/serve.log.pid)" 2>/dev/null; sleep 5; kill -KILL -- -"$(cat $R/serve.log.pid)" 2>/dev/null
}

gates() {
  setup
  F=$SITE/sglang/srt/model_executor/runner/flashinfer_autotune.py
  comment() { sed -i 's/^        "flashinfer_cutlass",$/        # "flashinfer_cutlass",/' $F; say "by hand: $(gate_state)"; }
  LINE=(--stop-on "Running FlashInfer autotune" --timeout 150 --linger 10)
  NOLINE=(--stop-on "Running FlashInfer autotune" --stop-on "Uvicorn running" --timeout 120 --linger 20)
  # A: entry commented by hand (0.5.7-0.5.12's state), autotune=true: the role restores it, the line shows.
  comment; play A -e autotune=true; say "A: $(gate_state)"
  launch A "${LINE[@]}"
  # B: commented again, autotune=false: RECORD's bytes and --disable-flashinfer-autotune, no line.
  comment; play B -e autotune=false; say "B: $(gate_state)"
  launch B "${NOLINE[@]}"
  # C: the shipped file, autotune=false: the flag alone, no line.
  play C -e autotune=false; say "C: $(gate_state)"
  launch C "${NOLINE[@]}"
  # The fleet-cache code on the tree the real server wrote.
  (cd $T && PYTHONPATH=$W/ans ANSIBLE_CONFIG=$T/ansible.cfg $BASE_PY -m ansible.cli.adhoc localhost -i localhost, -c local \
    -e ansible_python_interpreter=$BASE_PY --playbook-dir roles/sglang_server -m sglang_cache_target -a python=$PY) > $R/cache_target.txt 2>&1
  say "sglang_cache_target: $(grep -A8 SUCCESS $R/cache_target.txt | tr -d '\n' | cut -c1-300)"
  (cd $W/cache 2>/dev/null && find . | sort) > $R/cache_tree.txt
  say "cache tree: $(tr '\n' ' ' < $R/cache_tree.txt | cut -c1-400)"
}

"$PHASE"
say "phase $PHASE done"
tar -C $W -czf $OUT/$PHASE.tgz $PHASE
cp "$SUMMARY" $OUT/$PHASE-summary.txt
