"""One example, in process: Hypothesis draws, both sides run on fresh inputs, the oracles judge.

runner (draw, run, judge, shrink, save), execute (both sides, then every oracle), repro (the JSON repro
file, never pickle), devices (one draw, every device), upstream (the real vllm as a third side),
journals (the example database a run starts from), stagetimes (stage hooks). Above the oracles and reach.
"""
