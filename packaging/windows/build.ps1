# Windows build: the PyInstaller folder dist\offline-assistant (assistant-gui.exe, assistant.exe),
# then the Inno Setup installer. Run from the repository root in PowerShell, Python 3.11+ and
# Inno Setup 6 installed; Visual Studio Build Tools (C++) for llama-cpp-python's source build.
#
#     powershell -ExecutionPolicy Bypass -File packaging\windows\build.ps1
#
# GPU builds: set $env:CMAKE_ARGS before the venv step, e.g. "-DGGML_CUDA=on" (CUDA toolkit 12.x
# installed; the bundle then carries ggml-cuda.dll and needs the NVIDIA driver, not the toolkit).
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..\..")
if (-not $env:CMAKE_ARGS) { $env:CMAKE_ARGS = "-DGGML_NATIVE=OFF" }  # portable CPU build
if (-not (Test-Path .venv)) { py -3.11 -m venv .venv }
.venv\Scripts\python -m pip install -U pip
.venv\Scripts\python -m pip install -e ".[memory,dist]" pillow   # pillow: PyInstaller makes the .ico from icon.png
.venv\Scripts\python -m engine.models.fetch                # the demo models (ASSISTANT_BUNDLE_DEMO=0 leaves them out)
.venv\Scripts\python -m engine.memory.export        # the embedder's ONNX graph
.venv\Scripts\python -c "from PIL import Image; Image.open('assets/icon.png').save('assets/icon.ico', sizes=[(16,16),(32,32),(48,48),(256,256)])"
.venv\Scripts\python -m PyInstaller --noconfirm --distpath dist --workpath build\pyinstaller packaging\assistant.spec
# The same clean-environment check as Linux's `make dist-test`.
.venv\Scripts\python packaging\dist_test.py
$version = .venv\Scripts\python -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])"
& "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe" "/DAppVersion=$version" packaging\windows\offline-assistant.iss
