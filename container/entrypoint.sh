#!/bin/sh
# The image's entrypoint, run by tini (PID 1). It replaces itself with the command, so that command (`train`
# when SageMaker starts a job) is tini's direct child and receives the SIGTERM tini forwards.
# No command, `help` or `--help`: what this image is and how to use it.
case "${1:-help}" in
  help | --help | -h) exec python /opt/opentc/help.py ;;
  *) exec "$@" ;;
esac
