"""The keep_on_cpu targets: everything of them but their copies.

Targets: keep-on-cpu-ultravox-audio-lens, keep-on-cpu-interns1-num-patches, keep-on-cpu-phi4mm-image-sizes,
keep-on-cpu-keye-grid-thw. inputs.py holds the input models, record.py the records (TARGETS), oracles.py the
invariants, reference and consumer, planted.py the planted bugs and benign refactors. The copies are
legacy/keep_on_cpu.py and optimized/keep_on_cpu.py.
"""
