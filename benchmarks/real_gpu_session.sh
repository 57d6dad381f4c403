#!/usr/bin/env bash
# Everything run on a lent real GPU, read-only, as one script:  bash benchmarks/real_gpu_session.sh OUTDIR STEP...
# Steps: env  main  tiny  bench  phases  drift-start  drift-end  gate  history  budgets  energy-all  profile  budget-waits.  No step passes --gpu-caps; every NVML setter is replaced by one that
# refuses and logs (benchmarks/read_only_nvml.py), and the GPU's settings are read before and after.
set -u
OUTDIR=$1; shift; mkdir -p "$OUTDIR"
ROOT=$(cd "$(dirname "$0")/.." && pwd); cd "$ROOT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT:$ROOT/benchmarks" GPUENERGY_REFUSED_LOG="$OUTDIR/refused.log"
SMI="--query-gpu=name,uuid,driver_version,power.limit,power.default_limit,power.min_limit,power.max_limit,enforced.power.limit,persistence_mode,compute_mode,clocks.applications.graphics,mig.mode.current --format=csv"
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUTDIR/pip.txt" 2>&1
if python3 -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'gpuenergy' for e in m.entry_points(group='pytest11')))"; then
  PLUGIN=""; else PLUGIN="-p pytest_gpuenergy.plugin"; fi
export PYTEST_ADDOPTS="-p read_only_nvml $PLUGIN -p no:cacheprovider"
nvidia-smi $SMI >"$OUTDIR/smi_before.csv"
python3 -m pytest_gpuenergy.cli info --json >"$OUTDIR/info_before.json"
for step in "$@"; do
  echo "=== $step $(date -u +%FT%TZ)"
  case $step in
    env)   nvidia-smi; python3 -c "import sys, torch, pynvml, numpy; print(sys.version); print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name()); print('numpy', numpy.__version__)"; cat "$OUTDIR/pip.txt"; echo "PYTEST_ADDOPTS=$PYTEST_ADDOPTS" ;;
    main)  timeout 300 python3 -m pytest reference_workloads --gpu-backend=nvml --workload-size=full -q -rA --durations=20 \
             --energy-save --energy-storage="$OUTDIR/runs" --energy-json="$OUTDIR/main-full.json" --energy-html="$OUTDIR/main-full.html" ;;
    tiny)  timeout 120 python3 -m pytest reference_workloads --gpu-backend=nvml -q --durations=5 --energy-json="$OUTDIR/main-tiny.json" ;;
    bench) timeout 330 python3 benchmarks/real_gpu.py --out "$OUTDIR" ;;
    phases) timeout 150 python3 benchmarks/real_gpu_phases.py --out "$OUTDIR" ;;
    drift-*) timeout 60 python3 benchmarks/real_gpu.py --drift "${step#drift-}" --out "$OUTDIR" ;;
    gate)  G="--gpu-backend=nvml --workload-size=full -q --energy-repeat=3 --energy-storage=$OUTDIR/gate-runs"
           timeout 150 python3 -m pytest reference_workloads $G --energy-save
           timeout 150 python3 -m pytest reference_workloads $G --energy-fail=ets:5%,edp:10% --energy-save --energy-markdown="$OUTDIR/gate-1.md"; echo "gate, same process count: exit $?"
           timeout 150 python3 -m pytest reference_workloads $G --energy-fail=ets:5%,edp:10% -n 2 --energy-markdown="$OUTDIR/gate-xdist.md"; echo "gate, xdist -n 2: exit $?" ;;
    history) G="--gpu-backend=nvml --workload-size=full -q --energy-repeat=3 --energy-storage=$OUTDIR/history-runs"
           for i in 1 2 3; do timeout 150 python3 -m pytest reference_workloads $G --energy-save >"$OUTDIR/history-save-$i.txt" 2>&1; echo "baseline session $i: exit $?"; done
           for i in 1 2; do timeout 150 python3 -m pytest reference_workloads $G --energy-fail=ets:5%,edp:10% --energy-save --energy-markdown="$OUTDIR/history-gate-$i.md" | tail -25; echo "gate $i against the saved sessions: exit ${PIPESTATUS[0]}"; done ;;
    profile) timeout 120 python3 benchmarks/energy_all_profile.py --backend nvml --out "$OUTDIR" ;;
    energy-all) timeout 240 python3 benchmarks/energy_all_overhead.py --quick --backend nvml --pairs 3 --parts --out "$OUTDIR" ;;
    budget-waits) timeout 200 python3 benchmarks/budget_waits.py --backend nvml --out "$OUTDIR" ;;
    budgets) cp reference_workloads/budgets.json "$OUTDIR/budgets.json"; timeout 420 python3 reference_workloads/make_budgets.py --output "$OUTDIR/budgets.json" --gpu-backend nvml --caps '' --size full --runs 2 --margin 2 ;;
  esac
  echo "=== $step exit $? $(date -u +%FT%TZ)"
done
python3 -m pytest_gpuenergy.cli info --json >"$OUTDIR/info_after.json"
nvidia-smi $SMI >"$OUTDIR/smi_after.csv"
if cmp -s "$OUTDIR/smi_before.csv" "$OUTDIR/smi_after.csv"; then echo "GPU settings unchanged (nvidia-smi)"; else echo "GPU settings DIFFER:"; diff "$OUTDIR/smi_before.csv" "$OUTDIR/smi_after.csv"; fi
if [ -s "$OUTDIR/refused.log" ]; then echo "REFUSED NVML setters were called:"; cat "$OUTDIR/refused.log"; else echo "no NVML setter was called"; fi
