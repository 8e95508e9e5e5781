# Windows build: the PyInstaller folder dist\offline-assistant (assistant-gui.exe, assistant.exe),
# then the Inno Setup installer. Run from the repository root in PowerShell, Python 3.11+ and
# Inno Setup 6 installed; Visual Studio Build Tools (C++ and CMake) to build llama.cpp.
#
#     powershell -ExecutionPolicy Bypass -File packaging\windows\build.ps1
#
# llama.cpp is built by packaging\llama\build_wheel.py as on Linux: CPU variants plus one GPU backend,
# each a DLL in _internal\llama_cpp\lib that ggml loads at start if this PC can run it.
#   $env:LLAMA_BACKEND = "vulkan"  (default) any GPU with a Vulkan driver; needs the LunarG Vulkan SDK
#                                  (https://vulkan.lunarg.com; its installer sets VULKAN_SDK)
#   $env:LLAMA_BACKEND = "cuda"    NVIDIA only, peak speed; needs the CUDA toolkit (nvcc on PATH). The
#                                  bundle then carries the CUDA runtime (cudart/cublas DLLs, ~500 MB more)
#                                  and needs the NVIDIA driver, not the toolkit
#   $env:LLAMA_BACKEND = "cpu"     CPU variants only
# The wheel is built once per backend into build\wheels\<backend>\ (10-20 minutes); delete that
# folder to rebuild it. The Vulkan loader (vulkan-1.dll) is never bundled: it comes with the GPU driver.
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..\..")

# PowerShell 5.1 does not stop on a failing native command: check each exit code. A plain function
# (no param block), so arguments like -m reach the program instead of PowerShell's parameter binder.
function Invoke-Native {
    $exe = $args[0]
    $rest = @($args | Select-Object -Skip 1)
    & $exe @rest
    if ($LASTEXITCODE -ne 0) { throw "$exe $($rest -join ' ') failed (exit $LASTEXITCODE)" }
}

$backend = if ($env:LLAMA_BACKEND) { $env:LLAMA_BACKEND } else { "vulkan" }
if ($backend -notin @("vulkan", "cuda", "cpu")) { throw "LLAMA_BACKEND must be vulkan, cuda or cpu, not '$backend'" }
if ($backend -eq "vulkan") {
    if (-not $env:VULKAN_SDK) {
        throw "the Vulkan backend needs the LunarG Vulkan SDK (https://vulkan.lunarg.com; it sets VULKAN_SDK), or set `$env:LLAMA_BACKEND='cpu'"
    }
    $env:PATH = "$env:VULKAN_SDK\Bin;$env:PATH"   # glslc, the shader compiler the build runs
}

$py = ".venv\Scripts\python.exe"
if (-not (Test-Path $py)) { Invoke-Native py "-3.11" -m venv .venv }
Invoke-Native $py -m pip install --disable-pip-version-check -q -U pip

# llama-cpp-python from our build first: `pip install -e .` then finds the pinned version installed
# and does not build PyPI's CPU-only sdist.
$version = & $py -c "import sys; sys.path.insert(0, 'packaging/llama'); import build_wheel; print(build_wheel.pinned_version())"
if ($LASTEXITCODE -ne 0) { throw "cannot read the llama-cpp-python pin from pyproject.toml" }
$wheel = Get-ChildItem "build\wheels\$backend\llama_cpp_python-$version-*.whl" -ErrorAction SilentlyContinue | Select-Object -First 1
if (-not $wheel) {
    Invoke-Native $py packaging\llama\build_wheel.py --backend $backend
    $wheel = Get-ChildItem "build\wheels\$backend\llama_cpp_python-$version-*.whl" | Select-Object -First 1
}
Invoke-Native $py -m pip install --disable-pip-version-check --force-reinstall --no-deps $wheel.FullName
Invoke-Native $py -m pip install --disable-pip-version-check -e ".[gui,memory,dist]" pillow   # pillow: PyInstaller makes the .ico from icon.png

Invoke-Native $py -m engine.models.fetch          # the demo models (ASSISTANT_BUNDLE_DEMO=0 leaves them out)
Invoke-Native $py -m engine.memory.export         # the embedder's ONNX graph
Invoke-Native $py -c "from PIL import Image; Image.open('assets/icon.png').save('assets/icon.ico', sizes=[(16,16),(32,32),(48,48),(256,256)])"
# The update channel (UPDATE_MANIFEST_URL + UPDATE_PUBLIC_KEY): build\update_channel.json for the spec, or none.
Invoke-Native $py packaging\update_manifest.py channel
Invoke-Native $py -m PyInstaller --noconfirm --distpath dist --workpath build\pyinstaller packaging\assistant.spec
# The same clean-environment check as Linux's `make dist-test` (backend DLLs present, no driver DLLs,
# `assistant devices --json`, selftest, one terminal turn).
Invoke-Native $py packaging\dist_test.py --backend $backend
$appVersion = & $py -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])"
Invoke-Native "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe" "/DAppVersion=$appVersion" "/DLlamaBackend=$backend" packaging\windows\offline-assistant.iss
