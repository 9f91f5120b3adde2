"""The run: a session (fuzz.run.session.run), its orchestration and the processes it starts.

The session binds sides and checks before any work, orchestrates the items (one after another, or
through pytest-xdist workers), watches the isolated worker processes, confirms failures in fresh
processes (triage, replay) and shares the GPU (CUDA MPS). fuzz/run/child.py is the one protocol every
child process speaks. Above the in-process engine (fuzz.engine), below the commands (fuzz.commands).
"""
