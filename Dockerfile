# opentc: SageMaker Training Compiler rebuilt on open components, in two flavours from this one file
# (docs/compilers.md, "Which image"):
#   xla       (the default) torch 2.7 + PyTorch/XLA 2.7 (PJRT; XLA:CUDA through NVIDIA's PJRT plugin) and
#             torch.compile (TorchInductor): what AWS's Training Compiler ran, pinned where XLA:CUDA ends
#   inductor  current PyTorch with torch.compile (TorchInductor, Triton on GPUs): no torch-xla, no PJRT plugin
# Each flavour's pins are stacks/<flavour>.txt (with the shared ones in constraints.txt); dev/flavour turns them into
# the build arguments and tags below:
#   DOCKER_BUILDKIT=1 docker build -t opentc .                                    (xla)
#   DOCKER_BUILDKIT=1 docker build $(dev/flavour inductor build-args | sed 's/^/--build-arg /') -t opentc:inductor .
#   dev/container-engine build [FLAVOUR]     (CI: the same Dockerfile on a debootstrapped Debian 12, no registry)
# Everything comes from PyPI and Debian's packages: torch's own nvidia-* wheels are the CUDA libraries, and the
# driver comes from the host (the NVIDIA container runtime, or SageMaker). So the base needs no CUDA: plain Debian 12
# with its Python 3.11.
# Behind a TLS-intercepting proxy add `--secret id=ca,src=<CA bundle>`: pip uses it, no layer keeps it.
# No `# syntax=` line: it would pull a frontend image, and the builder's own BuildKit has what is used here.

# debian:bookworm-slim, pinned by digest (the build of 2026-08-03, as recorded in docker-library/repo-info,
# repos/debian/remote/bookworm-slim.md). To update: docs/image.md, "Updating the base image".
ARG BASE_IMAGE=debian:bookworm-slim@sha256:abd67ffcfa541b485a3dff59865ab629aa048a6c613e639d36e7456b0b229241

FROM ${BASE_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
# libpython3.11: torch_xla's extension links against it. tini: PID 1 that forwards SIGTERM to `train`.
# g++ (with gcc) and libpython3.11-dev (Python.h): the Inductor backend compiles C++ kernels on CPUs, and Triton
# builds its launchers with gcc and Python.h on GPUs (Triton brings its own ptxas); sagemaker-training, published
# only as an sdist, builds its C extension with them too. The minimum: build-essential, make and the rest of a
# toolchain are not needed.
# apt versions come from the pinned base's Debian 12 point release and its security updates; pinning them
# too would break the build at every Debian security update (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv libpython3.11 tini \
      g++ libpython3.11-dev \
 && rm -rf /var/lib/apt/lists/*

# Which stack: stacks/${FLAVOUR}.txt (xla or inductor). Declared after the apt layer, which is the same for both: a
# build argument is in every later RUN's environment, so one declared above would give each flavour an apt layer of its
# own (39 s more for the second flavour's build here).
ARG FLAVOUR=xla
# A venv: Debian 12 refuses pip installs into the system Python, and a venv keeps ours apart from apt's.
# /opt/ml exists even with no job mounted: sagemaker-training writes to ~/sagemaker_local/ when it is missing.
ENV VIRTUAL_ENV=/opt/venv
ENV PATH=/opt/venv/bin:${PATH}
# /opt/opentc/constraints.txt: the shared pins and this flavour's stack in one file, for derived images.
COPY constraints.txt /opt/opentc/shared-constraints.txt
COPY stacks/${FLAVOUR}.txt /opt/opentc/stack.txt
RUN --mount=type=secret,id=ca \
    { [ ! -f /run/secrets/ca ] || export PIP_CERT=/run/secrets/ca; } \
 && cat /opt/opentc/shared-constraints.txt /opt/opentc/stack.txt > /opt/opentc/constraints.txt \
 && rm /opt/opentc/shared-constraints.txt /opt/opentc/stack.txt \
 && python3 -m venv "$VIRTUAL_ENV" \
 && mkdir -p /opt/ml \
 && pip install --no-cache-dir -c /opt/opentc/constraints.txt pip setuptools wheel

# The two large layers are installed with uv (pinned in constraints.txt), fetched into /tmp for each step and gone
# with it: the image keeps pip alone, for requirements.txt and derived images. The same constraints, the bytecode
# compiled as pip compiles it; torch 2.14.1 and torchvision took uv 37.5 s of CPU and 22 s, pip 49 s and 52 s here.
# uv reads no PIP_CERT: a proxy's CA reaches it as SSL_CERT_FILE.
# The heaviest layer first, so it is reused while the rest changes: the flavour's stack, every package its stack
# file pins (xla: torch with its CUDA libraries, torch-xla, the XLA:CUDA plugin and its ptxas; inductor: torch).
RUN --mount=type=secret,id=ca --mount=type=bind,source=stacks,target=/tmp/stacks \
    { [ ! -f /run/secrets/ca ] || export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; } \
 && sed -n 's/^\([A-Za-z0-9][A-Za-z0-9._-]*\)==.*/\1/p' "/tmp/stacks/${FLAVOUR}.txt" > /tmp/stack-packages.txt \
 && pip install --no-cache-dir --quiet -c /opt/opentc/constraints.txt --target /tmp/uv uv \
 && /tmp/uv/bin/uv pip install --no-cache --compile-bytecode -c /opt/opentc/constraints.txt \
      -r /tmp/stack-packages.txt \
 && rm -r /tmp/uv /tmp/stack-packages.txt

# sagemaker-training's sdist is built here, with the image's own gcc and Python.h (the build's temporary folder
# goes with the step).
RUN --mount=type=secret,id=ca \
    { [ ! -f /run/secrets/ca ] || export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; } \
 && pip install --no-cache-dir --quiet -c /opt/opentc/constraints.txt --target /tmp/uv uv \
 && /tmp/uv/bin/uv pip install --no-cache --compile-bytecode -c /opt/opentc/constraints.txt \
      transformers datasets evaluate accelerate sagemaker-training psutil tlparse matplotlib scikit-learn \
 && rm -r /tmp/uv

# This repository's packages last: they change most often. Mounted, not copied, so no source tree stays in a
# layer; no build isolation, so this step needs no network (setuptools is already in the venv).
# The toolkit's console script `train` (the entry that reads the job itself) replaces sagemaker-training's own,
# installed by the layer above: the build fails if /opt/venv/bin/train is anything else.
RUN --mount=type=bind,source=launcher,target=/tmp/opentc/launcher,rw \
    --mount=type=bind,source=compare,target=/tmp/opentc/compare,rw \
    --mount=type=bind,source=toolkit,target=/tmp/opentc/toolkit,rw \
    pip install --no-cache-dir --no-build-isolation -c /opt/opentc/constraints.txt \
      "/tmp/opentc/launcher[${FLAVOUR}]" /tmp/opentc/compare /tmp/opentc/toolkit \
 && pip check \
 && grep -q "from opentc_toolkit.entry import main" /opt/venv/bin/train \
 && python -m opentc_toolkit.stack > /opt/opentc/stack-constraints.txt

COPY container/entrypoint.sh container/help.py container/bash_env.sh README.md /opt/opentc/
COPY docs /opt/opentc/docs
COPY sample/job /opt/opentc/sample-job

# The labels' claims, checked against what pip installed (a mismatch fails the build, and so does an XLA:CUDA
# plugin whose PJRT C API version is not the one torch-xla expects), recorded in /opt/opentc/image.json for
# help.py. The defaults are the xla flavour's (dev/flavour xla build-args; a test keeps them equal); dev/flavour
# gives the inductor flavour's ("none": not in that image). CI's stand-in build also overrides BASE_IMAGE.
ARG BASE_IMAGE
ARG SOURCE_URL=https://github.com/opentc/opentc
ARG OPENTC_VERSION=0.1.0
ARG TORCH_VERSION=2.7.0
ARG TORCH_XLA_VERSION=2.7.0
ARG PJRT_PLUGIN_VERSION=0.5.3
ARG PJRT_C_API_VERSION=0.67
ARG CUDA_VERSION=12.6
ARG PTXAS_VERSION=12.6.85
ARG PYTHON_VERSION=3.11
ARG OS_VERSION=debian12
ARG XLA_IMAGE_TAG=2.7.0-xla-gpu-py311-cu126-debian12-sagemaker
ARG XLA_CUDA="PJRT plugin jax-cuda12-pjrt ${PJRT_PLUGIN_VERSION} (PJRT C API ${PJRT_C_API_VERSION})"
RUN --mount=type=bind,source=container/build_info.py,target=/tmp/build_info.py \
    python /tmp/build_info.py /opt/opentc/image.json "flavour=${FLAVOUR}" "opentc=${OPENTC_VERSION}" \
      "torch=${TORCH_VERSION}" "torch-xla=${TORCH_XLA_VERSION}" "jax-cuda12-pjrt=${PJRT_PLUGIN_VERSION}" \
      "pjrt-c-api=${PJRT_C_API_VERSION}" "cuda=${CUDA_VERSION}" "ptxas=${PTXAS_VERSION}" \
      "python=${PYTHON_VERSION}" "os=${OS_VERSION}" "base=${BASE_IMAGE}" "source=${SOURCE_URL}" \
      "xla-image-tag=${XLA_IMAGE_TAG}"

LABEL org.opencontainers.image.title="opentc" \
      org.opencontainers.image.description="SageMaker Training Compiler on open compilers (${FLAVOUR} flavour)" \
      org.opencontainers.image.version="${OPENTC_VERSION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opentc.flavour="${FLAVOUR}" \
      org.opentc.torch="${TORCH_VERSION}" \
      org.opentc.torch-xla="${TORCH_XLA_VERSION}" \
      org.opentc.xla-cuda="${XLA_CUDA}" \
      org.opentc.cuda="${CUDA_VERSION}" \
      org.opentc.ptxas="${PTXAS_VERSION}" \
      org.opentc.python="${PYTHON_VERSION}" \
      org.opentc.os="${OS_VERSION}"

# The toolkit sets the XLA variables itself (PJRT_DEVICE, USE_TORCH_XLA, GPU_NUM_DEVICES, the debug switches)
# and keeps any that are already set, so none of them is set here: a value here would look like the user's
# choice. SAGEMAKER_TRAINING_MODULE: sagemaker-training's own entry (python -m sagemaker_training.cli.train), if
# someone runs it, lands in the toolkit.
# OPENTC_XLA_IMAGE_TAG: the xla image's tag, which the inductor image names when a job asks it for XLA (the
# toolkit decides by what is installed, never by this).
ENV SAGEMAKER_TRAINING_MODULE=opentc_toolkit.entry:main \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OPENTC_XLA_IMAGE_TAG=${XLA_IMAGE_TAG}
# Runtime defaults the toolkit does not manage:
# - LANG: minimal bases have no locale; C.UTF-8 is built into glibc, so tools print non-ASCII text.
# - NVIDIA_*: the NVIDIA runtime mounts the driver (libcuda) and nvidia-smi into the container only when
#   asked; sagemaker-training counts GPUs with nvidia-smi.
# - PIP_CONSTRAINT: every `pip install` in the image or in an image built FROM it (requirements.txt too)
#   keeps torch, torch-xla, the XLA:CUDA plugin and the CUDA libraries at the tested versions.
# - PIP_*: requirements.txt is installed at job start, as root, often without network to pypi.org's version
#   check: no root warning, no version check, no cache left in the container.
# - HF_HUB_DISABLE_TELEMETRY: a training job sends nothing to the Hugging Face Hub it did not ask for.
# - BASH_ENV: the SageMaker Python SDK v3's ModelTrainer replaces the entrypoint with bash; its jobs are handed
#   to `train` (container/bash_env.sh; every other bash in the image is left alone).
ENV LANG=C.UTF-8 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PIP_CONSTRAINT=/opt/opentc/stack-constraints.txt \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    BASH_ENV=/opt/opentc/bash_env.sh

# tini forwards docker's and SageMaker's SIGTERM to its one child, which entrypoint.sh replaces with the
# command (`train`, `bash`, `python ...`); with no command it runs `train` when a job is mounted, else help.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/opentc/entrypoint.sh"]
