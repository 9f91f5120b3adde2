"""What CUDA MPS does to the other clients when one client faults (run on a GPU host).

Starts a private MPS control daemon, runs CLIENTS torch processes that keep the GPU
busy, makes one of them fault (``--fault assert``: a device-side assert from an
out-of-range index; ``--fault illegal``: a Triton store far outside any allocation)
and prints, per client, what its next CUDA call said and when it exited; then how
long a new client waits before the server takes it, and whether a client outside
MPS runs while the server is up. The answers shaped fuzz/run/gpushare.py
(docs/gpu-sharing.md). Nothing here changes a GPU setting; the daemon is quit at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLIENT = r"""
import json, os, sys, time
import torch
role, until = sys.argv[1], float(sys.argv[2])
log = lambda **kw: print(json.dumps({"role": role, "t": time.time(), **kw}), flush=True)
try:
    x = torch.randn(512, 512, device="cuda")
    log(event="ready")
    while time.time() < until:
        if role == "assert" and time.time() > until - 6:
            torch.zeros(4, device="cuda")[torch.tensor([100], device="cuda")]
        if role == "illegal" and time.time() > until - 6:
            import triton, triton.language as tl
            @triton.jit
            def store_far(ptr, offset):
                tl.store(ptr + offset, 1.0)
            store_far[(1,)](x, 1 << 40)
        x = (x @ x).tanh()
        torch.cuda.synchronize()
    log(event="done")
except Exception as exc:
    log(event="error", type=type(exc).__name__, text=str(exc).splitlines()[0][:300])
    try:
        torch.cuda.synchronize(); log(event="sync-after-error-ok")
    except Exception as again:
        log(event="sync-after-error", text=str(again).splitlines()[0][:200])
    sys.exit(3)
"""

PROBE = "import torch, time; t=time.time(); torch.ones(1, device='cuda').sum().item(); print(round(time.time()-t, 3))"


def control(env: dict, command: str) -> str:
    done = subprocess.run(["nvidia-cuda-mps-control"], input=command + "\n", env=env, capture_output=True,
                          text=True, timeout=30)
    return (done.stdout + done.stderr).strip()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=("assert", "illegal"), required=True)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=14.0)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mps-probe-"))
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(base / "pipe"), CUDA_MPS_LOG_DIRECTORY=str(base / "log"))
    (base / "pipe").mkdir()
    (base / "log").mkdir()
    client = base / "client.py"  # a file: Triton compiles a kernel only from a function defined in one
    client.write_text(CLIENT)
    started = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, capture_output=True, text=True)
    print("daemon start:", started.returncode, started.stdout.strip(), started.stderr.strip())
    out: dict = {"fault": args.fault}
    try:
        until = time.time() + args.seconds
        roles = [args.fault] + [f"victim{i}" for i in range(1, args.clients)]
        clients = {role: subprocess.Popen([sys.executable, str(client), role, str(until)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for role in roles}
        # A new client while the faulted ones are still alive or just gone.
        time.sleep(args.seconds - 5)
        t0 = time.time()
        late = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
        out["new_client_during"] = {"rc": late.returncode, "seconds": round(time.time() - t0, 2),
                                    "said": (late.stdout + late.stderr).strip().splitlines()[-1:]}
        for role, proc in clients.items():
            stdout, stderr = proc.communicate(timeout=120)
            out[role] = {"rc": proc.returncode, "exited": time.time(), "lines": stdout.strip().splitlines()[-3:],
                         "stderr_tail": stderr.strip().splitlines()[-1:]}
        for attempt in range(30):
            t0 = time.time()
            after = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
            if after.returncode == 0:
                out["new_client_after"] = {"attempt": attempt, "seconds": round(time.time() - t0, 2)}
                break
            out.setdefault("refused_after", []).append((after.stdout + after.stderr).strip().splitlines()[-1:])
            time.sleep(1)
        outside = dict(env)
        outside.pop("CUDA_MPS_PIPE_DIRECTORY")
        outside.pop("CUDA_MPS_LOG_DIRECTORY")
        no_mps = subprocess.run([sys.executable, "-c", PROBE], env=outside, capture_output=True, text=True, timeout=120)
        out["non_mps_client_while_server_up"] = {"rc": no_mps.returncode,
                                                 "said": (no_mps.stdout + no_mps.stderr).strip().splitlines()[-1:]}
        out["server_list"] = control(env, "get_server_list")
    finally:
        out["quit"] = control(env, "quit")
        time.sleep(1)
        left = subprocess.run(["pgrep", "-af", "nvidia-cuda-mps"], capture_output=True, text=True).stdout.strip()
        out["mps_processes_left"] = left
        for log in ("server", "control"):
            path = base / "log" / f"{log}.log"
            out[f"{log}_log_tail"] = path.read_text().splitlines()[-8:] if path.exists() else []
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
