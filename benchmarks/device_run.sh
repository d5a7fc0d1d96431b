#!/usr/bin/env bash
# The one command of a lent GPU session (issue 77): the device check, then the device campaign.
#
#   bash benchmarks/device_run.sh [DEADLINE_S]            (there: the device tool's run, carry .whl .device-data)
#   DEVICE_RUN_SMOKE=1 bash benchmarks/device_run.sh      (here: the same steps on the CPU, at a toy scale)
#
# Prepared here by benchmarks/device_prepare.sh; the exact call and how to adopt what comes back:
# docs/speed.md. Steps:
# 1. the wheels in .whl/ installed into /tmp/site (PYTHONPATH), as the device tool's README says;
#    with DEVICE_RUN_SMOKE=1 this machine's .venv instead (nothing installed);
# 2. the data of .device-data/ unpacked into /tmp/pflcore-data (benchmarks/device_data.py, every
#    file's md5 checked): PFL_DATA points at it for Fashion-MNIST, and FedCP's partition is linked
#    where the paper preset's data_root names it, ../shared/data/mnist-fedcp-dir0.1 beside the
#    checkout (where one is there already, as here, it is checked to be the carried one);
# 3. benchmarks/device_check.py for what is left of DEADLINE_S (default 570 s: the device tool's
#    600 s a command, less a margin), its last part the device campaign, FedCP Table 2's entries
#    first (--first fedcp/t2_main), its records and manifest as one tar;
# 4. a short summary. Under $OUT (what comes back, at most 8 files): device-run.log (all output),
#    device-check.json, device-campaign.tar, device-check-pytest.log and .xml, runner-logs.tar.gz.
# DEVICE_CHECK_ARGS adds flags to device_check.py (e.g. "--campaign-reserve 300" or "--no-campaign").
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
DEADLINE=${1:-${DEVICE_DEADLINE_S:-570}}
SMOKE=${DEVICE_RUN_SMOKE:-}
OUT=${OUT:-$PWD/outputs/device-run}
mkdir -p "$OUT"
LOG=$OUT/device-run.log

main() {
  echo "device run: $(date -u +%Y-%m-%dT%H:%M:%SZ), deadline ${DEADLINE} s${SMOKE:+, CPU smoke}, OUT=$OUT"
  [ -f .device-data/SOURCE ] && sed 's/^/device run: source /' .device-data/SOURCE
  # no .git travels: records name the commit the data was prepared at, and whether the package differs from it
  [ -f .device-data/SOURCE ] && export PFLCORE_SOURCE=$PWD/.device-data/SOURCE
  if [ -n "$SMOKE" ]; then
    PY=${PYTHON:-$PWD/.venv/bin/python}
    echo "device run: smoke: this machine's $PY, no wheel installed"
  else
    PY=python3
    ls .whl/*.whl > /dev/null 2>&1 || { echo "device run: no .whl/ here: name .whl in the call's carry" \
      "(benchmarks/device_prepare.sh fills it)."; return 2; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl || { echo "device run: the wheels did not install (above); nothing ran."; return 2; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    echo "device run: $(ls .whl/*.whl | wc -l) wheels installed into /tmp/site in $(( $(date +%s) - START )) s"
  fi
  export PYTHONUNBUFFERED=1
  "$PY" - <<'EOF' || { echo "device run: the notebook stack does not import (above); nothing ran."; return 2; }
import cvxpy, ipykernel, nbformat, papermill, torch
from pflcore.algorithms.fedpac import qp_solvers
print(f"device run: torch {torch.__version__}, CUDA available {torch.cuda.is_available()}, papermill "
      f"{papermill.__version__}, ipykernel {ipykernel.__version__}, cvxpy {cvxpy.__version__} "
      f"({', '.join(qp_solvers())})")
EOF

  DATA=${DEVICE_DATA_DEST:-/tmp/pflcore-data}
  if [ -d .device-data ]; then
    "$PY" benchmarks/device_data.py unpack .device-data "$DATA" || echo "device run: data not unpacked (above)"
  else
    echo "device run: no .device-data/ here (carry it); the runs look for their data as usual"
  fi
  [ -d "$DATA/fmnist" ] && export PFL_DATA=$DATA${PFL_DATA:+:$PFL_DATA}
  FEDCP=../shared/data/mnist-fedcp-dir0.1
  if [ -d "$DATA/mnist-fedcp-dir0.1" ]; then
    if [ -e "$FEDCP" ]; then
      if cmp -s "$FEDCP/config.json" "$DATA/mnist-fedcp-dir0.1/config.json"; then
        echo "device run: $FEDCP is there already and holds the carried partition"
      else
        echo "device run: $FEDCP is there already and is not the carried partition; FedCP's entries read it"
      fi
    else
      mkdir -p ../shared/data && ln -s "$DATA/mnist-fedcp-dir0.1" "$FEDCP" \
        && echo "device run: $FEDCP -> $DATA/mnist-fedcp-dir0.1"
    fi
  fi

  local used=$(( $(date +%s) - START ))
  local budget=$(( DEADLINE - used - 20 ))  # 20 s for the summary and the logs
  echo "device run: device_check.py with a budget of ${budget} s (${used} s used before it)"
  local flags=(--budget "$budget" --out "$OUT/device-check.json" --campaign-out /tmp/device-campaign
               --campaign-tar "$OUT/device-campaign.tar" --first fedcp/t2_main --skip-cpu)
  [ -n "$SMOKE" ] && flags+=(--cpu-smoke)
  rm -rf /tmp/device-campaign
  # shellcheck disable=SC2086
  "$PY" benchmarks/device_check.py "${flags[@]}" ${DEVICE_CHECK_ARGS:-}
  local rc=$?
  echo "device run: device_check.py ended with $rc after $(( $(date +%s) - START )) s"
  if [ -d outputs/device-campaign ]; then  # each run's log and executed notebook: why a run failed
    tar -czf "$OUT/runner-logs.tar.gz" outputs/device-campaign 2> /dev/null
    [ "$(stat -c %s "$OUT/runner-logs.tar.gz")" -lt 15000000 ] \
      || tar -czf "$OUT/runner-logs.tar.gz" --exclude='*.ipynb' outputs/device-campaign
  fi
  summary
  return $rc
}

summary() {
  "$PY" - "$OUT" <<'EOF'
import json, sys, tarfile
from pathlib import Path

out = Path(sys.argv[1])
try:
    check = json.loads((out / "device-check.json").read_text())
except (OSError, ValueError) as err:
    sys.exit(f"summary: no device check record ({err})")
parts = check["parts"]
env = parts.get("environment", {})
print(f"summary: {env.get('device_name', 'no GPU')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, "
      f"{check.get('elapsed_s')} s of {check.get('budget_s')}")
for name, part in parts.items():
    print(f"summary: part {name}: {'ok' if part.get('ok') else 'FAILED ' + str(part.get('error', ''))[:200]}"
          f" ({part.get('seconds', '-')} s)")
for method, timed in parts.get("gpu_rounds", {}).items():
    if isinstance(timed, dict):
        seq, vec = (timed.get(k, {}).get("median_round_s") for k in ("sequential", "vectorised"))
        print(f"summary: {method} s/round sequential {seq}, vectorised {vec}")
tests = parts.get("pytest", {})
if "tests" in tests:
    print(f"summary: CUDA tests {tests['tests']}, failed {tests['failures']}, errors {tests['errors']}, "
          f"skipped {tests['skipped']}")
t1 = parts.get("table1_fmnist", {}).get("estimate")
if t1:
    print(f"summary: FedPAC T1 column {t1['sequential_min']} min sequential, {t1['best_executor_min']} min best")
camp = parts.get("campaign", {})
if camp:
    print(f"summary: campaign finished {camp.get('finished')}, cut off {camp.get('cut_off')}, failed "
          f"{list((camp.get('failed') or {}))}, not started {camp.get('not_started')}, K {camp.get('concurrent')}")
tar = out / "device-campaign.tar"
if tar.exists():
    with tarfile.open(tar) as bundle:
        got = [n for n in bundle.getnames() if n.endswith(".json") and n != "manifest.json"]
    print(f"summary: {tar.name} holds {len(got)} record(s); here: python -m pflcore.campaign adopt "
          f"<files_at>/{tar.name}")
EOF
}

main 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
