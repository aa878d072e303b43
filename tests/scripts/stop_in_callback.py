"""A stop that lands inside a weakref callback (as it does inside Dynamo's guard dictionaries while torch.compile
works): the callback waits for the signal, so it always lands there. Python cannot raise from a callback; the stop
must still reach the script.

model/ready        written inside the callback, when the stop may be sent
model/ended.json   what the script's `finally` saw: the exception that ended it, and whether it trained to its end
"""

import json
import os
import sys
import time
import weakref

model = os.environ["SM_MODEL_DIR"]
ended = {"exception": None, "trained_to_the_end": False}


def collected(_reference):
    with open(os.path.join(model, "ready"), "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:   # the stop lands here
        time.sleep(0.05)


class Guard:
    pass


guard = Guard()
reference = weakref.ref(guard, collected)
try:
    del guard                    # the callback runs now, in the main thread
    for _ in range(40):          # what a swallowed stop lets run: training on, to the end
        time.sleep(0.05)
    ended["trained_to_the_end"] = True
except BaseException as e:
    ended["exception"] = type(e).__name__
    raise
finally:
    with open(os.path.join(model, "ended.json"), "w") as f:
        json.dump(ended, f)
    sys.stdout.flush()
