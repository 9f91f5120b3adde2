"""Two-tree pairs for the sync rule (docs/verdicts.md#which-sync-rule), built from the shipped 0.27.1 pack.

    python lab/scripts/sync_rule_trees.py OUT

writes three vllm trees under OUT (each a folder holding ``vllm/``, versioned 0.27.1):

* ``base``: the 0.27.1 files as they are;
* ``refactor``: a benign refactor of three functions whose 0.27.1 code syncs more than the 0.28.0 copy's
  budget allows (glm4v's ``Glm4vVisionEmbeddings.forward``, fla's ``prepare_chunk_indices``, diffusion
  gemma's ``DiffusionGemmaRequestStates.add_request``): the same syncs on both sides, so ``base`` vs
  ``refactor`` must not be a sync regression (it was, under the budget declared for 0.28.0);
* ``planted``: the refactor plus one extra device->host read in each: a sync regression under any rule.

Each edit is checked to apply exactly once, so a pack that changed makes this fail loudly, not quietly build
an unedited tree.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "sources" / "vllm-0.27.1"
GLM = "vllm/model_executor/models/glm4_1v.py"
FLA = "vllm/third_party/flash_linear_attention/ops/index.py"
GEMMA = "vllm/model_executor/models/diffusion_gemma.py"

_ADD = "        self.init_canvas(torch.tensor([slot_idx], device=self.device))\n        self.step[slot_idx] = 0\n"
_HISTORY = "        self.accepted_canvas_history_len[slot_idx] = 0\n"
_EMBEDS = "        self.self_conditioning_embeds[slot_idx] = 0\n"
REFACTOR = {
    GLM: [("        h_coords, w_coords = h_coords.to(device), w_coords.to(device)\n",
           "        h_coords = h_coords.to(device)\n        w_coords = w_coords.to(device)\n")],
    FLA: [("    indices = torch.cat(\n        [\n            torch.arange(n)\n"
           "            for n in triton.cdiv(prepare_lens(cu_seqlens), chunk_size).tolist()\n        ]\n    )\n",
           "    counts = triton.cdiv(prepare_lens(cu_seqlens), chunk_size).tolist()\n"
           "    indices = torch.cat([torch.arange(n) for n in counts])\n")],
    GEMMA: [(_ADD + _HISTORY + _EMBEDS, _ADD + _EMBEDS + _HISTORY)],
}
PLANTED = {
    GLM: [("        total_seq = h_coords.shape[0]\n",
           "        total_seq = h_coords.shape[0]\n"
           "        _ = pos_embed_weight.sum().item()  # planted: one more sync\n")],
    FLA: [("    counts = triton.cdiv(prepare_lens(cu_seqlens), chunk_size).tolist()\n",
           "    counts = triton.cdiv(prepare_lens(cu_seqlens), chunk_size).tolist()\n"
           "    _ = cu_seqlens.max().item()  # planted: one more sync\n")],
    GEMMA: [(_ADD, _ADD + "        _ = self.step.sum().item()  # planted: one more sync\n")],
}


def _tree(into: Path, *edits: dict[str, list[tuple[str, str]]]) -> None:
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(PACK / "vllm", into / "vllm")
    (into / "vllm" / "_version.py").write_text('__version__ = version = "0.27.1"\n')
    for edit in edits:
        for path, swaps in edit.items():
            file = into / path
            text = file.read_text()
            for old, new in swaps:
                if text.count(old) != 1:
                    raise SystemExit(f"{path}: the edit's text occurs {text.count(old)} times, not once: {old!r}")
                text = text.replace(old, new)
            file.write_text(text)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    _tree(out / "base")
    _tree(out / "refactor", REFACTOR)
    _tree(out / "planted", REFACTOR, PLANTED)
    print(f"trees: {out / 'base'}, {out / 'refactor'}, {out / 'planted'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
