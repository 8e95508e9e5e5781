# Two commands on a fresh machine: `make run` (chat) and `make test` (whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# llama.cpp as the app ships it: backends loaded at run time (CPU variants for old and new
# processors + Vulkan), built once from the patched sdist (packaging/llama/build_wheel.py) and
# installed into the venv before the project, so tests and the bundle run the same libraries.
# LLAMA_BACKEND=cpu skips the Vulkan SDK; cuda adds CUDA (needs nvcc); metal on macOS.
LLAMA_BACKEND ?= vulkan
LLAMA_WHEEL := build/wheels/$(LLAMA_BACKEND)/BUILD.json
DEMO_MODELS := models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf
# The bundled embedder exported to ONNX once (same weights, checked): memory then runs without torch.
EMBEDDER_ONNX := models/embedders/all-MiniLM-L6-v2.onnx

.PHONY: venv models run chat test test-fast bench dist dist-test clean

$(LLAMA_WHEEL): packaging/llama/build_wheel.py packaging/llama/patches.py
	$(PYTHON) packaging/llama/build_wheel.py --backend $(LLAMA_BACKEND)

$(BIN)/.installed: pyproject.toml $(LLAMA_WHEEL)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -U pip
	$(BIN)/pip install --disable-pip-version-check -q --force-reinstall --no-deps $(dir $(LLAMA_WHEEL))llama_cpp_python-*.whl
	$(BIN)/pip install --disable-pip-version-check -e '.[gui,memory,test]'
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
# Then the numerics tests again under a second CPU kernel (haswell, or x64 where haswell is the best):
# they must hold on any processor, not encode one kernel's rounding (tests/second_variant.py).
test: venv models
	@$(BIN)/python -m pytest; rc=$$?; [ $$rc -ne 5 ] || echo "make test: no tests were collected" >&2; exit $$rc
	@$(BIN)/python tests/second_variant.py; rc=$$?; [ $$rc -ne 5 ] || echo "make test: no numerics tests were collected" >&2; exit $$rc

# The fast suite, about 3 minutes on 2 cores: pure-Python tests and the turn logic on the scripted
# fake backend (tests/fake_backend.py), and mypy over the chat engine and the tools
# (tests/test_types.py); no model loads, no Qt windows. The demo files are read for
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
# Then, as root on Debian/Ubuntu (CI), the .deb: apt install, run by a plain user, apt remove.
dist-test: dist
	$(BIN)/python packaging/dist_test.py --backend $(LLAMA_BACKEND)
	@if [ "$$(id -u)" = 0 ] && command -v dpkg-deb >/dev/null; then $(BIN)/python packaging/linux/deb_test.py; \
	else echo "dist-test: the .deb install test needs root on Debian/Ubuntu: skipped"; fi

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
