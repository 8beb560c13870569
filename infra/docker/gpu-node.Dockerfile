# syntax=docker/dockerfile:1.7
# The zerolayer GPU node image (docs/DEPLOY.md). Build from the repository root:
#   docker build -f infra/docker/gpu-node.Dockerfile --target gpu -t zerolayer-gpu-node:cuda .    (gpu is also the default)
#   docker build -f infra/docker/gpu-node.Dockerfile --target cpu -t zerolayer-gpu-node:cpu .
#   docker build -f infra/docker/gpu-node.Dockerfile --target gpu-baked --build-context model=PATH/TO/EXPORT --build-arg MODEL_ID=NAME -t zerolayer-gpu-node:cuda-NAME .
# Linted by infra/docker/dockerfile.test.ts (no Docker engine runs where the tests run, so this
# file has not been built there; the test runs the cpu stage's file set and entrypoint instead).

# Node 20: the runtime the project is tested on (package.json engines, shared/FACTS.md).
ARG NODE_IMAGE=node:20.20.2-bookworm-slim
# CUDA 13: the CUDA provider below links libcublas.so.13, libcublasLt.so.13, libcudart.so.13 and
# libcurand.so.10 (its ELF NEEDED list), and the driver's libcuda.so.1, which the NVIDIA container
# runtime mounts. cuDNN is not on that list, but the provider carries cuDNN frontend code and can
# load cuDNN at run time, so the cudnn flavour is the default; `--build-arg
# CUDA_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04` is about 1 GB smaller for graphs whose ops
# never reach cuDNN (not verified here).
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04

FROM ${NODE_IMAGE} AS node

# Production dependencies only. .npmrc comes first: it carries onnxruntime-node-install=skip, so
# onnxruntime-node's postinstall does not fetch its own CUDA build (the provider is installed
# explicitly below, the one build that loads into the pinned onnxruntime-node 1.29.0).
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# The CUDA execution provider, exactly as on a bare GPU machine (docs/GPU.md): the script packs
# com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 from the npm registry and copies its two
# provider libraries beside onnxruntime-node's binding. Its closing ldd report runs here, where
# no CUDA library is present; the runtime stage has them.
FROM deps AS cuda-provider
COPY infra/scripts/install-cuda-provider.sh infra/scripts/install-cuda-provider.sh
RUN infra/scripts/install-cuda-provider.sh

# The CUDA runtime image. The node runs its TypeScript through tsx (a runtime dependency: the
# model runner's worker thread registers tsx's loader too), so there is no compile step.
FROM ${CUDA_IMAGE} AS gpu-runtime
COPY --from=node /usr/local/bin/node /usr/local/bin/node
WORKDIR /app
COPY --from=cuda-provider /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY shared/src ./shared/src
COPY gpu-node/src ./gpu-node/src
COPY gpu-node/tools ./gpu-node/tools
# Models live in /models/<id>, as in the repository's models/<name>: the directory's name is the
# model id clients ask for. A deployment mounts its volume at /models and sets MODEL_DIR; without
# one, the node serves the tiny demo model, generated into /models/tiny here (the node itself
# never generates one: a missing directory stops it with one clear message).
RUN install -d -o 10001 -g 10001 /models \
    && node --import tsx gpu-node/tools/generate-model/cli.ts --preset tiny --out /models/tiny
# glibc reads MALLOC_* only when a process starts: they are set here for the same reason the
# launcher (infra/scripts/launch-gpu-node.mjs) sets them, 1.5-3x faster steps at large KV.
ENV NODE_ENV=production \
    MALLOC_MMAP_MAX_=0 \
    MALLOC_TRIM_THRESHOLD_=68719476736 \
    MODEL_DIR=/models/tiny \
    HOST=0.0.0.0 \
    PORT=9101 \
    EXECUTION_PROVIDER=cuda
# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
USER 10001:10001
EXPOSE 9101
# The node drains on SIGTERM (gpu-node/src/shutdown.ts); node itself is PID 1 (exec form, no
# shell and no npm in between), so the signal reaches it.
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "--import", "tsx", "gpu-node/src/main.ts"]

# The same node with the model inside the image: versioned and rolled like code. Pass the export's
# directory as a named build context (--build-context model=DIR; .dockerignore keeps models/ out
# of the main context) and the id clients will ask for (--build-arg MODEL_ID=...).
FROM gpu-runtime AS gpu-baked
ARG MODEL_ID
RUN test -n "$MODEL_ID" || { echo "gpu-baked needs --build-arg MODEL_ID=<the model name clients ask for>" >&2; exit 1; }
COPY --from=model --chown=10001:10001 . /models/${MODEL_ID}
ENV MODEL_DIR=/models/${MODEL_ID}

# CPU-only pools: onnxruntime-node's own CPU provider, no CUDA libraries.
FROM ${NODE_IMAGE} AS cpu
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY shared/src ./shared/src
COPY gpu-node/src ./gpu-node/src
COPY gpu-node/tools ./gpu-node/tools
RUN install -d -o 10001 -g 10001 /models \
    && node --import tsx gpu-node/tools/generate-model/cli.ts --preset tiny --out /models/tiny
ENV NODE_ENV=production \
    MALLOC_MMAP_MAX_=0 \
    MALLOC_TRIM_THRESHOLD_=68719476736 \
    MODEL_DIR=/models/tiny \
    HOST=0.0.0.0 \
    PORT=9101 \
    EXECUTION_PROVIDER=cpu
USER 10001:10001
EXPOSE 9101
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "--import", "tsx", "gpu-node/src/main.ts"]

# Last, so that a build without --target makes the CUDA image.
FROM gpu-runtime AS gpu
