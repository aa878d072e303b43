# Sourced by every non-interactive bash in this image (ENV BASH_ENV). It does nothing unless this bash is PID 1
# running exactly the entrypoint the SageMaker Python SDK v3's ModelTrainer gives a job with
# SourceCode(entry_script=...): that entrypoint replaces the image's own and would run the script with plain
# python, the compiler hyperparameters passed to it as arguments and ignored, and bash as PID 1 (a stop's
# SIGTERM never reaches the script). Such a job runs through the image's `train` instead, under tini, as any
# SageMaker job does; opentc_toolkit.model_trainer decides, and the toolkit translates the SDK's SourceCode
# exactly or refuses it with the recipe that works. A SourceCode(command=...) runs as given.
if [ "$$" = 1 ] && [ -n "${BASH_EXECUTION_STRING-}" ] &&
  OPENTC_BASH_EXECUTION_STRING="$BASH_EXECUTION_STRING" /opt/venv/bin/python -m opentc_toolkit.model_trainer; then
  unset BASH_ENV
  exec /usr/bin/tini -- train
fi
