#!/bin/sh
# The image's entrypoint, run by tini (PID 1). It replaces itself with the command, so that command (`train`
# when SageMaker starts a job) is tini's direct child and receives the SIGTERM tini forwards.
# No command: `train` when a job is mounted (a launcher that starts the image without one, such as the
# SageMaker SDK's ModelTrainer with its code in a channel), else what this image is and how to use it.
job="${SAGEMAKER_BASE_DIR:-/opt/ml}"
if [ "$#" -eq 0 ]; then
  if [ -f "$job/input/config/hyperparameters.json" ]; then
    echo "opentc: no command given and a job is mounted at $job: running train" >&2
    exec train
  fi
  exec python /opt/opentc/help.py
fi
case "$1" in
  help | --help | -h) exec python /opt/opentc/help.py ;;
  *) exec "$@" ;;
esac
