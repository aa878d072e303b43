# opentc: SageMaker Training Compiler rebuilt on PyTorch 2.7 + PyTorch/XLA 2.7 (PJRT). README.md, "The image".
#   GPU image:  DOCKER_BUILDKIT=1 docker build -t opentc:gpu .
#   CPU image:  dev/container-engine build   (Debian 12 stand-in base, PyPI torch-xla: what CI builds and tests)
# Behind a TLS-intercepting proxy add `--secret id=ca,src=<CA bundle>`: pip uses it, no layer keeps it.
# No `# syntax=` line: it would pull a frontend image, and the builder's own BuildKit has what is used here.

# torch-xla 2.7.0's CUDA build targets CUDA 12.6; cuDNN because torch's CUDA kernels load it.
ARG BASE_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu22.04

# sagemaker-training is published only as an sdist with a C extension: its wheel is built in this stage so
# that no compiler or header ends up in the image.
FROM ${BASE_IMAGE} AS wheels
ARG DEBIAN_FRONTEND=noninteractive
# apt versions come from whichever base is built on, so they cannot be pinned (DL3008; see the next stage).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates gcc python3-dev python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY constraints.txt /tmp/constraints.txt
RUN --mount=type=secret,id=ca \
    { [ ! -f /run/secrets/ca ] || export PIP_CERT=/run/secrets/ca; } \
 && python3 -m venv /tmp/build \
 && /tmp/build/bin/pip install --no-cache-dir -c /tmp/constraints.txt pip setuptools wheel \
 && /tmp/build/bin/pip wheel --no-cache-dir --no-deps -c /tmp/constraints.txt -w /wheels sagemaker-training

FROM ${BASE_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
# Versions come from the base image's distribution: the same Dockerfile builds on Ubuntu 22.04 (Python 3.10)
# and on CI's Debian 12 stand-in (3.11), so apt packages cannot be pinned here (DL3008).
# libpython3.X: torch_xla's extension links against it. tini: PID 1 that forwards SIGTERM to `train`.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv tini \
 && apt-get install -y --no-install-recommends \
      "libpython$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
 && rm -rf /var/lib/apt/lists/*

# A venv: Debian 12 refuses pip installs into the system Python, and a venv keeps ours apart from apt's.
# /opt/ml exists even with no job mounted: sagemaker-training writes to ~/sagemaker_local/ when it is missing.
ENV VIRTUAL_ENV=/opt/venv
ENV PATH=/opt/venv/bin:${PATH}
COPY constraints.txt /opt/opentc/constraints.txt
RUN --mount=type=secret,id=ca \
    { [ ! -f /run/secrets/ca ] || export PIP_CERT=/run/secrets/ca; } \
 && python3 -m venv "$VIRTUAL_ENV" \
 && mkdir -p /opt/ml \
 && pip install --no-cache-dir -c /opt/opentc/constraints.txt pip setuptools wheel

# The heaviest layer first, so it is reused while the rest changes. The default is the torch-xla 2.7.0 CUDA 12.6
# wheel (not on PyPI); CI passes TORCH_XLA_SPEC=torch-xla==2.7.0 (PyPI's CPU/TPU build of the same version).
ARG TORCH_XLA_SPEC=https://storage.googleapis.com/pytorch-xla-releases/wheels/cuda/12.6/torch_xla-2.7.0-cp310-cp310-manylinux_2_28_x86_64.whl
RUN --mount=type=secret,id=ca \
    { [ ! -f /run/secrets/ca ] || export PIP_CERT=/run/secrets/ca; } \
 && pip install --no-cache-dir -c /opt/opentc/constraints.txt torch "${TORCH_XLA_SPEC}"

RUN --mount=type=secret,id=ca --mount=type=bind,from=wheels,source=/wheels,target=/tmp/wheels \
    { [ ! -f /run/secrets/ca ] || export PIP_CERT=/run/secrets/ca; } \
 && pip install --no-cache-dir -c /opt/opentc/constraints.txt --find-links /tmp/wheels \
      transformers datasets accelerate sagemaker-training psutil

# This repository's packages last: they change most often. Mounted, not copied, so no source tree stays in a
# layer; no build isolation, so this step needs no network (setuptools is already in the venv).
RUN --mount=type=bind,source=launcher,target=/tmp/opentc/launcher,rw \
    --mount=type=bind,source=toolkit,target=/tmp/opentc/toolkit,rw \
    pip install --no-cache-dir --no-build-isolation -c /opt/opentc/constraints.txt \
      /tmp/opentc/launcher /tmp/opentc/toolkit \
 && pip check

COPY container/entrypoint.sh container/help.py README.md /opt/opentc/
COPY sample/job /opt/opentc/sample-job

# The labels' claims, checked against what pip installed (a mismatch fails the build), recorded in
# /opt/opentc/image.json for help.py. The CPU image overrides TORCH_XLA_BUILD, CUDA_VERSION, PYTHON_VERSION
# and OS_VERSION.
ARG BASE_IMAGE
ARG SOURCE_URL=https://github.com/opentc/opentc
ARG OPENTC_VERSION=0.1.0
ARG TORCH_VERSION=2.7.0
ARG TORCH_XLA_VERSION=2.7.0
ARG TORCH_XLA_BUILD=cuda12.6
ARG CUDA_VERSION=12.6
ARG PYTHON_VERSION=3.10
ARG OS_VERSION=ubuntu22.04
RUN --mount=type=bind,source=container/build_info.py,target=/tmp/build_info.py \
    python /tmp/build_info.py /opt/opentc/image.json "opentc=${OPENTC_VERSION}" "torch=${TORCH_VERSION}" \
      "torch-xla=${TORCH_XLA_VERSION}" "torch-xla.build=${TORCH_XLA_BUILD}" "cuda=${CUDA_VERSION}" \
      "python=${PYTHON_VERSION}" "os=${OS_VERSION}" "base=${BASE_IMAGE}" "source=${SOURCE_URL}"

LABEL org.opencontainers.image.title="opentc" \
      org.opencontainers.image.description="SageMaker Training Compiler on PyTorch/XLA (PJRT)" \
      org.opencontainers.image.version="${OPENTC_VERSION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opentc.torch="${TORCH_VERSION}" \
      org.opentc.torch-xla="${TORCH_XLA_VERSION}" \
      org.opentc.torch-xla.build="${TORCH_XLA_BUILD}" \
      org.opentc.cuda="${CUDA_VERSION}" \
      org.opentc.python="${PYTHON_VERSION}" \
      org.opentc.os="${OS_VERSION}"

# sagemaker-training's `train` hands the job to the toolkit. The toolkit sets the XLA variables itself
# (PJRT_DEVICE, USE_TORCH_XLA, GPU_NUM_DEVICES, the debug switches) and keeps any that are already set, so
# none of them is set here: a value here would look like the user's choice.
ENV SAGEMAKER_TRAINING_MODULE=opentc_toolkit.entry:main \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# Runtime defaults the toolkit does not manage:
# - LANG: minimal bases have no locale; C.UTF-8 is built into glibc, so tools print non-ASCII text.
# - NVIDIA_*: the NVIDIA runtime mounts nvidia-smi only with the `utility` capability, and sagemaker-training
#   counts GPUs with nvidia-smi (NVIDIA's bases set these too; this keeps them on any base).
# - PIP_*: requirements.txt is installed at job start, as root, often without network to pypi.org's version
#   check: no root warning, no version check, no cache left in the container.
# - HF_HUB_DISABLE_TELEMETRY: a training job sends nothing to the Hugging Face Hub it did not ask for.
ENV LANG=C.UTF-8 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_DISABLE_TELEMETRY=1

# tini forwards docker's and SageMaker's SIGTERM to its one child, which entrypoint.sh replaces with the
# command (`train`, `bash`, `python ...`); with no command it prints help.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/opentc/entrypoint.sh"]
