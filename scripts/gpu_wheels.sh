#!/usr/bin/env bash
# Wheels of what accelkit needs beyond a CUDA image's own packages, for a GPU machine without internet.
# The image this targets has Python 3.12 with torch, transformers, numpy, typer, rich, psutil, nvidia-ml-py,
# prometheus-client, jinja2, httpx and pytest; it lacks torchao, the HTTP server's stack (fastapi, starlette,
# uvicorn, pydantic), plotly and llguidance (structured outputs' engine: one abi3 wheel). Fetched from PyPI with
# their dependencies (fastapi needs annotated-doc and plotly narwhals, neither of which such an image has):
#
#   scripts/gpu_wheels.sh [DIR]          # default DIR: .whl (ignored by git)
#
# scripts/gpu_check.sh installs DIR/*.whl into /tmp/site when .whl/ exists (no index, no dependency resolution),
# ahead of the image's own packages on PYTHONPATH.
set -euo pipefail
dir=${1:-.whl}
py=${PYTHON_VERSION:-3.12}
mkdir -p "$dir"
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
python3 -m pip download -q --only-binary=:all: --python-version "$py" --implementation cp "${platforms[@]}" \
  -d "$dir" "torchao==0.17.0" fastapi uvicorn plotly "llguidance>=1.9,<2"
ls -l "$dir"
