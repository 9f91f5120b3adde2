"""The diffusion_gemma targets: everything of them but their copies.

Targets: diffusion-gemma-states, diffusion-gemma-sampler. inputs.py holds the input models, record.py the
records (TARGETS), oracles.py the invariants, reference and consumer, planted.py the planted bugs and benign
refactors. The copies are legacy/diffusion_gemma.py and optimized/diffusion_gemma.py.
"""
