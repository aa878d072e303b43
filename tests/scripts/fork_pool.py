"""What datasets.map(num_proc=N) does (run_clm.py's --preprocessing_num_workers): a pool of forked workers, used,
then terminated, many times over; a pool worker must end when terminate() sends it SIGTERM."""
import multiprocessing
import os
import sys

rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 30
for _ in range(rounds):
    with multiprocessing.get_context("fork").Pool(4) as pool:   # __exit__ is terminate()
        assert pool.map(abs, range(-50, 50)) == [abs(i) for i in range(-50, 50)]
with open(os.path.join(os.environ.get("SM_MODEL_DIR", "."), "pools.txt"), "w") as f:
    f.write(str(rounds))
