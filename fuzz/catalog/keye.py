"""DESIGN.md rows 2-4: keye's encoder rope table, vision-tower output split and
the host-built image/video metadata."""

from fuzz.targets import Comparison, Target

DESIGN_ROWS = (2, 3, 4)
_KEYE = "vllm/model_executor/models/keye.py"

TARGETS = [
    Target(
        name="keye-encoder-rope",
        upstream=(f"{_KEYE}::KeyeSiglipEncoder.forward",),
        legacy="legacy.keye:KeyeSiglipEncoder.forward",
        optimized="optimized.keye:KeyeSiglipEncoder.forward",
        inputs="strategies.keye:KeyeEncoderRopeInputs",
        # Both sides gather the same rows of the same table: bitwise equal.
        comparison=Comparison(floats="exact"),
        # max(h, w) over host ints sizes the table; the ids, their stack and the
        # gather stay on the device. Legacy's `pids.max() + 1` fed to
        # torch.arange is one sync.
        expected_optimized_syncs=0,
        description="rope table sized max(h, w) over the grids instead of pids.max() + 1",
    ),
    Target(
        name="keye-vision-split",
        upstream=(f"{_KEYE}::KeyeSiglipVisionTransformer.forward",),
        legacy="legacy.keye:KeyeSiglipVisionTransformer.forward",
        optimized="optimized.keye:KeyeSiglipVisionTransformer.forward",
        inputs="strategies.keye:KeyeVisionSplitInputs",
        comparison=Comparison(floats="exact"),
        # Split sizes come from host grids; legacy read 2 * n cu_seqlens entries.
        expected_optimized_syncs=0,
        description="per-image output split by host t*h*w sizes instead of reading cu_seqlens[i]",
    ),
    Target(
        name="keye-process-image",
        upstream=(f"{_KEYE}::BaseKeyeModule._process_image_input",),
        legacy="legacy.keye:BaseKeyeModule._process_image_input",
        optimized="optimized.keye:BaseKeyeModule._process_image_input",
        inputs="strategies.keye:KeyeProcessImageInputs",
        comparison=Comparison(floats="exact"),
        # Position ids and sample indices go `.to(device, non_blocking=True)`
        # from freshly built pageable tensors, which CUDA performs synchronously
        # (2 hidden syncs; only cu_seqlens is pinned by async_tensor_h2d); plus
        # the one `image_grid_thw.tolist()` when the grid is on the device
        # (keye_vl1_5 does not keep it on the CPU): 2 for keye.py, 3 for keye_vl1_5.
        expected_optimized_syncs=3,
        description="position ids / cu_seqlens / sample indices staged non-blocking; grid read once with tolist()",
    ),
    Target(
        name="keye-process-video",
        upstream=(f"{_KEYE}::BaseKeyeModule._process_video_embeds",),
        legacy="legacy.keye:BaseKeyeModule._process_video_embeds",
        optimized="optimized.keye:BaseKeyeModule._process_video_embeds",
        inputs="strategies.keye:KeyeProcessVideoInputs",
        comparison=Comparison(floats="exact"),
        # The same 2 hidden syncs (pageable non-blocking position ids and
        # sample indices), plus the per-row `sub_thw.detach().cpu()` loop the PR
        # left as it was: one D2H sync per grid row when the grid is on the
        # device (keye_vl1_5's per-frame rows). 2 for keye.py; up to
        # 2 + strategies.keye.MAX_VIDEO_ROWS for keye_vl1_5, the bound used here.
        expected_optimized_syncs=6,
        description="position ids / cu_seqlens / sample indices staged non-blocking",
    ),
]
