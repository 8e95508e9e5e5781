# Two commands on a fresh machine: `make run` (chat) and `make test` (whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Portable llama.cpp build: a native build enables AMX kernels that crash on some CPUs.
# GPU users: see README (CUDA: -DGGML_CUDA=on, Metal: -DGGML_METAL=on).
CMAKE_ARGS ?= -DGGML_NATIVE=OFF
DEMO_MODELS := models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf
# The bundled embedder exported to ONNX once (same weights, checked): memory then runs without torch.
EMBEDDER_ONNX := models/embedders/all-MiniLM-L6-v2.onnx

.PHONY: venv models run chat test test-fast bench dist dist-test clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -U pip
	CMAKE_ARGS="$(CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/pip install --disable-pip-version-check -e '.[memory,test]'
	touch $@

venv $(VENV): $(BIN)/.installed

$(DEMO_MODELS): $(BIN)/.installed models/catalog.toml
	$(BIN)/python -m engine.models.fetch

$(EMBEDDER_ONNX): $(BIN)/.installed
	$(BIN)/python -m engine.memory.export

models: $(DEMO_MODELS) $(EMBEDDER_ONNX)

# The desktop app; without a display it says so (QT_QPA_PLATFORM=offscreen, or `make chat`).
run: venv models
	$(BIN)/python -m app

chat: venv models
	$(BIN)/assistant chat

# pytest exits 5 when it collected nothing: that is a failure, said plainly.
test: venv models
	@$(BIN)/python -m pytest; rc=$$?; [ $$rc -ne 5 ] || echo "make test: no tests were collected" >&2; exit $$rc

# The fast suite, about a minute on 2 cores: pure-Python tests and the turn logic on the scripted
# fake backend (tests/fake_backend.py); no model loads, no Qt windows. The demo files are read for
# their metadata only (planner tests).
test-fast: venv $(DEMO_MODELS)
	@$(BIN)/python -m pytest -m "not model and not gui"; rc=$$?; [ $$rc -ne 5 ] || echo "make test-fast: no tests were collected" >&2; exit $$rc

bench: venv models
	$(BIN)/python bench/kv_reuse.py

# The Linux bundle: dist/offline-assistant/assistant-gui (+ a .tar.gz); see packaging/README.md.
$(BIN)/.dist-installed: $(BIN)/.installed
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dist]'
	touch $@

dist: venv models $(BIN)/.dist-installed
	PYTHON=$(BIN)/python packaging/linux/build.sh

# The built app in a clean environment (no venv on PATH, empty HOME): selftest + terminal chat.
dist-test: dist
	$(BIN)/python packaging/dist_test.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
