#!/usr/bin/env bash
# The GPU machine's one call: install the project without network, then benchmarks/gpu.py.
#
#   bash benchmarks/gpu.sh [gpu.py arguments...]
#
# The machine has torch, lightning, torchmetrics, scikit-learn, onnx and pytest but no
# package registry: what else the project needs (jsonargparse and its needs, and a
# setuptools recent enough to build it) travels as wheels in the ignored folder .whl/
# (benchmarks/README.md says how to fill it), and the project installs with --no-deps. MNIST travels in the ignored folder data/. The records
# go to benchmarks/results/gpu.json, and to $OUT when that is set.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if compgen -G ".whl/*.whl" > /dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-cache-dir .whl/*.whl || exit 1
fi
"$python" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
"$python" -c "import kernel_layers, jsonargparse; print('kernel-layers', kernel_layers.__version__)" || exit 1
"$python" benchmarks/gpu.py "$@"
status=$?
if [ -n "${OUT:-}" ] && [ -f benchmarks/results/gpu.json ]; then
    cp benchmarks/results/gpu.json "$OUT/"
fi
exit $status
