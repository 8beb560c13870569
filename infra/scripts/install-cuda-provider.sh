#!/usr/bin/env bash
# Puts ONNX Runtime 1.29.0's CUDA execution provider beside onnxruntime-node's own binary, which is
# what the package's postinstall would fetch from GitHub if it could (.npmrc skips it: offline
# installs fail there). The binaries come from the npm package below, built for ORT 1.29.0 and
# linked against CUDA 13; 1.30.0 would refuse them, hence the pin (shared/FACTS.md).
#   infra/scripts/install-cuda-provider.sh [path/to/com.github.asus4.onnxruntime.linux-x64-gpu-0.4.9.tgz]
# Without an argument it runs `npm pack` (registry access). Then: EXECUTION_PROVIDER=cuda npm run gpu-node.
set -euo pipefail
PKG=com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=$ROOT/node_modules/onnxruntime-node/bin/napi-v6/linux/x64
ORT_VERSION=$(node -p "require('$ROOT/node_modules/onnxruntime-node/package.json').version")
[ "$ORT_VERSION" = 1.29.0 ] || { echo "onnxruntime-node is $ORT_VERSION; these CUDA binaries load only into 1.29.0" >&2; exit 1; }
[ -d "$DEST" ] || { echo "$DEST is missing: run npm ci first" >&2; exit 1; }

WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
TGZ=${1:-}
if [ -z "$TGZ" ]; then TGZ=$WORK/$(cd "$WORK" && npm pack --silent "$PKG"); fi
tar xzf "$TGZ" -C "$WORK" package/Plugins/Linux/x64/libonnxruntime_providers_cuda.so package/Plugins/Linux/x64/libonnxruntime_providers_shared.so
install -m 0755 "$WORK"/package/Plugins/Linux/x64/*.so "$DEST"/
echo "installed into $DEST:"; ls -l "$DEST"/libonnxruntime_providers_*.so

# The provider needs CUDA 13's cuBLAS, cuRAND and runtime at load time; say which are not found
# (set LD_LIBRARY_PATH to their directory, e.g. /usr/local/cuda-13.0/targets/x86_64-linux/lib).
MISSING=$(ldd "$DEST/libonnxruntime_providers_cuda.so" | grep 'not found' || true)
if [ -n "$MISSING" ]; then echo "not found by the loader yet (set LD_LIBRARY_PATH):"; echo "$MISSING"; fi
