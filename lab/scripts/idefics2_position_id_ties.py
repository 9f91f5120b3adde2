"""F20 (docs/findings/README.md): 0.29.0 and 0.30.0 ``Idefics2VisionEmbeddings.get_position_ids`` on one
image of ``h x h`` patches, every ``h <= n``, for the shipped ``num_patches_per_side`` values, on the CPU
and (where present) CUDA. Prints the sizes whose ids differ and how many ids do.

    PYTHONPATH=. python3 lab/scripts/idefics2_position_id_ties.py
"""

from types import SimpleNamespace

import torch

import legacy.idefics2_vision_model as legacy_copy
import optimized.idefics2_vision_model as optimized_copy


def embeddings(module, n: int, device: str):
    config = SimpleNamespace(hidden_size=1, image_size=n, patch_size=1, num_channels=1)
    return module.Idefics2VisionEmbeddings(config).to(device)


def main() -> None:
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        for n in (70, 32, 27, 26):
            old, new = embeddings(legacy_copy, n, device), embeddings(optimized_copy, n, device)
            diffs = []
            for h in range(1, n + 1):
                mask = torch.zeros(1, n, n, dtype=torch.bool)
                mask[0, :h, :h] = True
                mask = mask.to(device)
                a = old.get_position_ids(mask).cpu()
                b = new.get_position_ids(mask).cpu()
                if not torch.equal(a, b):
                    diffs.append((h, int((a != b).sum())))
            print(device, f"n={n}", "h x h images whose ids differ (h, ids):", diffs, flush=True)


if __name__ == "__main__":
    main()
