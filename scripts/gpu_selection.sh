#!/usr/bin/env bash
# GPU check of the LLM selection pipeline (docs/selection.md, "LM pipeline"): the gpu-h200 preset on one H200.
#
# Not yet run on a GPU: only the CPU forms have run (`--preset cpu-tiny`, and the gpu-h200 code path at real
# shapes in bf16 with `--device cpu --n 2 --prompts 1`).
#
# Run from the repository root on the GPU machine (python3 with a CUDA torch and transformers preinstalled; no
# network there). Packages that privcheck imports and the image lacks are installed from wheels carried in
# .whl/ (prepared on a machine with pip access):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     dp-accounting==0.6.0 python-flint==0.9.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
#     referencing==0.37.0 rpds-py==2026.9.1
#
# What it does: checks torch sees a GPU (else exits 3: it never downloads wheels), installs carried wheels
# into /tmp/site, checks imports (else exits 4, naming what is missing), `pip install -e . --no-deps`
# (falling back to `python3 -m mechanisms.selection.cli run selection` when the `privcheck run selection`
# entry point is unavailable), a 60-s smoke run of cpu-tiny on CUDA, then the gpu-h200 preset under
# `timeout 500`. Outputs in $OUT: selection_run.json (the artifact), selection/selection_run.json,
# selection_smoke.json, gpu_selection.log. Exit status: that of the gpu-h200 run (0 complete, 1 stopped by
# the wall-clock guard, 124 killed by timeout, 2 bad input).
#
# Expected runtime (estimates, not measurements): 131,200 sequences × 64 new tokens (8.4M tokens) from a
# 0.49B bf16 model in 48 `generate` calls of ~2,734 rows: each decode step is ~2.7 TFLOP (~5 ms at the
# ~790 TFLOP/s of bf16 matmuls on an H200) plus softmax/multinomial over 2,734 × 151,936 logits and
# ~20 ms of Python/launch overhead, so ~2-3 s per call, ~2-3 min in all; scoring 131,072 sequences × 96
# tokens (12.6M tokens, ~12.5 PFLOP) takes under a minute. Start-up and model init add ~30 s. The
# guard stops before a chunk that would pass 420 s (status "incomplete"), so the run ends within ~8 min.
GPU_JOB=gpu_selection
source "$(dirname "$0")/gpu_setup.sh"

if privcheck run selection --help >/dev/null 2>>"$LOG"; then
  RUN=(privcheck run selection)
else
  log "'privcheck run selection' unavailable (entry point not registered); using python3 -m mechanisms.selection.cli"
  RUN=($PY -m mechanisms.selection.cli run selection)
fi

log "smoke: cpu-tiny on cuda"
SMOKE=$(mktemp -d)
timeout 60 "${RUN[@]}" --preset cpu-tiny --device cuda --seed 0 --out "$SMOKE" --json 2>&1 | tee -a "$LOG"
log "smoke exit status ${PIPESTATUS[0]}"
cp "$SMOKE/selection_run.json" "$OUT/selection_smoke.json" 2>/dev/null || log "no smoke artifact"

log "gpu-h200 preset (timeout 500 s)"
start=$(date +%s)
timeout 500 "${RUN[@]}" --preset gpu-h200 --device cuda --out "$OUT/selection" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
log "gpu-h200 exit status $rc after $(( $(date +%s) - start )) s"
if [ -f "$OUT/selection/selection_run.json" ]; then
  cp "$OUT/selection/selection_run.json" "$OUT/selection_run.json"
else
  log "no artifact written (killed by the timeout or failed before writing)"
fi
exit "$rc"
