"""Says it is ready (a file `ready` in the working folder), then ends successfully once a file `go` appears there
(at most 60 s): a test's way to act between a script's work and its end."""

import os
import time

open("ready", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists("go") and time.monotonic() < deadline:
    time.sleep(0.05)
print("go seen" if os.path.exists("go") else "no go within 60 s", flush=True)
