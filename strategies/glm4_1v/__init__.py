"""The glm4_1v targets: everything of them but their copies.

Targets: glm4v-embeddings, glm4v-pos-embeds. inputs.py holds the input models, record.py the records
(TARGETS), oracles.py the invariants, reference and consumer, planted.py the planted bugs and benign
refactors. The copies are legacy/glm4_1v.py and optimized/glm4_1v.py.
"""
