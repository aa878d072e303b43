"""Succeeds, having broken what the worker's session uses once the script has ended (the report and measurements):
as a bug in them, or a library that patched what they rely on, would."""
import opentc_launcher.worker_session as worker_session


def broken(*args, **kwargs):
    raise RuntimeError("the step statistics are broken")


worker_session.step_statistics = broken
print("trained", flush=True)
