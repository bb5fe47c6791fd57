"""A user's script as the workers of a job (scripts/ps_run, train.sbatch
--command): it joins through the environment (ps.connect() with no address),
pushes integer gradients for 4 steps and checks the exact sum it pulls back;
prints "sum S expected E" and a line on stderr, exits 1 when they differ."""
import os
import sys

import numpy as np
import ps

STEPS, N = 4, 8
c = ps.connect(request_timeout=30)
assert c.rank == int(os.environ["PS_RANK"]) and c.num_workers == int(os.environ["PS_NUM_WORKERS"])
c.register_model({"tensors": [{"name": "w", "shape": [N]}], "optimizer": {"kind": "sgd", "lr": 1.0},
                  "consistency": os.environ.get("PS_CONSISTENCY", "sync")})
w = np.zeros(N, np.float32)
for s in range(STEPS):  # sync applies the mean: each step adds 1 + 2 + ... + W
    c.push_pull({"w": np.full(N, -c.num_workers * (c.rank + 1), np.float32)}, {"w": w}, step=s).wait()
expected = STEPS * N * c.num_workers * (c.num_workers + 1) // 2
print(f"sum {int(w.sum())} expected {expected}", flush=True)
print(f"rank {c.rank} on stderr", file=sys.stderr)
c.finish()
sys.exit(0 if int(w.sum()) == expected else 1)
