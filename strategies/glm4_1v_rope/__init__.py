"""The glm4v-rot-pos-emb target: everything of it but its copies (legacy/glm4_1v_rope.py, optimized/glm4_1v_rope.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants (and a
reference or consumer where one applies), planted.py the planted bugs and benign refactors.
"""
