# Shared set-up of the GPU scripts (sourced, not run): set GPU_JOB first. Checks that torch sees a GPU (else
# exit 3; it never downloads wheels), installs the wheels carried in .whl into /tmp/site, checks the imports
# privcheck needs (else exit 4, naming what is missing), then `pip install -e . --no-deps`.
# Defines OUT, LOG, PY and log().
set -u -o pipefail
OUT="${OUT:-$PWD/${GPU_JOB}_out}"
mkdir -p "$OUT"
LOG="$OUT/${GPU_JOB}.log"
PY=python3
export PYTHONUNBUFFERED=1
log() { echo "[${GPU_JOB}] $*" | tee -a "$LOG"; }

if ! $PY -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >>"$LOG" 2>&1; then
  log "torch with CUDA is not available here (no torch, a CPU-only build, or no GPU); not downloading wheels"
  exit 3
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$LOG" 2>&1 || true

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$LOG" 2>&1 || { log "installing the carried wheels failed (see log)"; exit 4; }
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
missing=$($PY - <<'EOF'
import importlib
mods = {"numpy": "numpy", "scipy": "scipy", "mpmath": "mpmath", "flint": "python-flint",
        "dp_accounting": "dp-accounting==0.6.0", "jsonschema": "jsonschema", "transformers": "transformers"}
print(" ".join(pkg for mod, pkg in mods.items() if importlib.util.find_spec(mod) is None))
EOF
)
if [ -n "$missing" ]; then
  log "missing Python packages: $missing (carry them as wheels in .whl, see the header of this script)"
  exit 4
fi
$PY -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' | tee -a "$LOG"

$PY -m pip install -q -e . --no-deps --no-build-isolation >>"$LOG" 2>&1 || log "pip install -e . failed; using PYTHONPATH"
