#!/usr/bin/env bash
# GPU run of the DP-GRPO `gpu-h200` preset (docs/dpgrpo.md, "Presets") on one H200, or on N GPUs of one machine
# with --nproc N (torchrun, NCCL; docs/scaling.md, "DP-GRPO on several processes").
#
# UNTESTED ON A GPU: written on a machine without one. Only the same code path at reduced shapes ran there
# (`privcheck run dp-grpo --preset gpu-h200 --reduced --device cpu`, tests/dpgrpo/test_run.py; the same under
# torchrun with 2 gloo ranks, tests/dpgrpo/test_launch.py). The --nproc form has never run on NCCL.
#
# Usage: bash scripts/gpu_dpgrpo.sh [--nproc N] [--dry-run]
#   --nproc N   N ranks, one GPU each: every command runs under `python3 -m torch.distributed.run --standalone
#               --nproc-per-node N` (NCCL, which privcheck picks for --device cuda); needs N visible GPUs (else
#               exit 2). --nproc 1 runs the NCCL path on one GPU. Without --nproc: one plain process, as before
#   --dry-run   print the commands it would run, one per line, and exit 0 (no GPU, no set-up)
#
# Run from the repository root on the GPU machine (python3 with a CUDA torch and transformers preinstalled; no
# network there). Carry the missing pure wheels as for scripts/gpu_selection.sh (see its header), plus peft:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     dp-accounting==0.6.0 python-flint==0.9.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
#     referencing==0.37.0 rpds-py==2026.9.1 peft
#   then: run(command="bash scripts/gpu_dpgrpo.sh", carry=[".whl"], timeout_s=600)
#
# What it does: the shared set-up (scripts/gpu_setup.sh), a smoke run of the reduced preset on CUDA (60 s),
# then the full preset, one OS-entropy replicate of the dp_grpo arm (the preset's own 420-s wall-clock guard
# marks a stopped run `incomplete`, privacy_release false), under `timeout 520`. Outputs in $OUT: the run
# directory dpgrpo/ (run-*.json, compare.json, report.md, accuracy.png; private/ stays on the device),
# dpgrpo_smoke.json and gpu_dpgrpo.log. Under --nproc N rank 0 writes them and the run artifact's
# environment.distributed records world_size N, backend nccl and launcher torchrun. Commit dpgrpo/run-*.json
# under docs/artifacts/.
# Exit status: that of the full run (0 complete, 1 stopped by the guard, 124 killed by timeout, 2 bad input;
# under torchrun any failed rank makes it non-zero).
GPU_JOB=gpu_dpgrpo
NPROC=
DRY_RUN=0
usage() { sed -n '9,13p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc) [ $# -ge 2 ] || { echo "gpu_dpgrpo.sh: --nproc needs a value" >&2; exit 2; }; NPROC="$2"; shift 2 ;;
    --nproc=*) NPROC="${1#--nproc=}"; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_dpgrpo.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
if [ -n "$NPROC" ] && ! [[ "$NPROC" =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu_dpgrpo.sh: invalid --nproc '$NPROC': allowed range is a positive integer (GPUs to use)" >&2
  exit 2
fi

PY=${PY:-python3}
if [ -n "$NPROC" ]; then
  RUN=($PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" -m privcheck.cli run dp-grpo)
fi
SMOKE_ARGS=(--preset gpu-h200 --reduced --device cuda --seed 0 --arms dp_grpo --skip-verification --no-timing --json)
FULL_ARGS=(--preset gpu-h200 --device cuda --arms dp_grpo --json)

if [ "$DRY_RUN" -eq 1 ]; then
  [ -n "$NPROC" ] || RUN=(privcheck run dp-grpo)
  echo "${RUN[*]} ${SMOKE_ARGS[*]} --out SMOKE_DIR"
  echo "${RUN[*]} ${FULL_ARGS[*]} --out OUT/dpgrpo"
  exit 0
fi

source "$(dirname "$0")/gpu_setup.sh"

if ! $PY -c 'import peft' >>"$LOG" 2>&1; then
  log "missing Python package: peft (carry it as a wheel in .whl)"
  exit 4
fi
if [ -n "$NPROC" ]; then
  gpus=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>>"$LOG")
  if [ "${gpus:-0}" -lt "$NPROC" ]; then
    log "--nproc $NPROC needs $NPROC GPUs; $gpus visible"
    exit 2
  fi
  log "torchrun: $NPROC ranks, one GPU each (NCCL)"
elif privcheck run dp-grpo --help >/dev/null 2>>"$LOG"; then
  RUN=(privcheck run dp-grpo)
else
  log "'privcheck run dp-grpo' unavailable (entry point not registered); using python3 -m privcheck.cli"
  RUN=($PY -m privcheck.cli run dp-grpo)
fi

log "smoke: gpu-h200 --reduced on cuda"
SMOKE=$(mktemp -d)
timeout 60 "${RUN[@]}" "${SMOKE_ARGS[@]}" --out "$SMOKE" 2>&1 | tail -c 4000 | tee -a "$LOG"
log "smoke exit status ${PIPESTATUS[0]}"
cp "$SMOKE"/run-*.json "$OUT/dpgrpo_smoke.json" 2>/dev/null || log "no smoke artifact"

log "gpu-h200 preset (timeout 520 s)"
start=$(date +%s)
timeout 520 "${RUN[@]}" "${FULL_ARGS[@]}" --out "$OUT/dpgrpo" 2>&1 | tail -c 8000 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
log "gpu-h200 exit status $rc after $(( $(date +%s) - start )) s"
rm -rf "$OUT/dpgrpo/private"     # private telemetry never leaves the device
exit "$rc"
