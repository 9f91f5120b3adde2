"""docs/design.md rows 2-4: keye's encoder rope table, vision-tower output split and
the host-built image/video metadata."""

from fuzz.api import Comparison, Target

DESIGN_ROWS = (2, 3, 4)
_KEYE = "vllm/model_executor/models/keye.py"

TARGETS = [
    Target(
        name="keye-encoder-rope",
        upstream=(f"{_KEYE}::KeyeSiglipEncoder.forward",),
        legacy="legacy.keye:KeyeSiglipEncoder.forward",
        optimized="optimized.keye:KeyeSiglipEncoder.forward",
        inputs="strategies.keye.inputs:KeyeEncoderRopeInputs",
        # Both sides gather the same rows of the same table: bitwise equal.
        comparison=Comparison(floats="exact", layout=True),
        # max(h, w) over host ints sizes the table; the ids, their stack and the
        # gather stay on the device. Legacy's `pids.max() + 1` fed to
        # torch.arange is one sync.
        expected_optimized_syncs=0,
        description="rope table sized max(h, w) over the grids instead of pids.max() + 1",
        invariants=(
            "strategies.keye.oracles:keye_layers_share_metadata",
            "strategies.keye.oracles:keye_cu_seqlens_running_sum",
            "strategies.keye.oracles:keye_rope_rows_follow_tokens",
            "strategies.keye.oracles:keye_rope_depends_only_on_position",
        ),
        reference="strategies.keye.oracles:KEYE_ENCODER_ROPE",
        # Each layer's KeyeSiglipAttention: (cu_seqlens[1:] - cu_seqlens[:-1]).max(),
        # then max_seqlen.item() in the flash-attention ViT wrapper.
        consumer="strategies.keye.oracles:keye_encoder_layer_reads",
    ),
    Target(
        name="keye-vision-split",
        upstream=(f"{_KEYE}::KeyeSiglipVisionTransformer.forward",),
        legacy="legacy.keye:KeyeSiglipVisionTransformer.forward",
        optimized="optimized.keye:KeyeSiglipVisionTransformer.forward",
        inputs="strategies.keye.inputs:KeyeVisionSplitInputs",
        comparison=Comparison(floats="exact", layout=True),
        # Split sizes come from host grids; legacy read 2 * n cu_seqlens entries.
        expected_optimized_syncs=0,
        description="per-image output split by host t*h*w sizes instead of reading cu_seqlens[i]",
        invariants=(
            "strategies.keye.oracles:keye_split_covers_sequence",
            "strategies.keye.oracles:keye_split_sizes_follow_grids",
        ),
        reference="strategies.keye.oracles:KEYE_VISION_SPLIT",
        # No consumer: the pieces go to Projector.forward (keye.py), which only
        # rearranges them by their grid and runs norms/linears on the device --
        # no host read. The layer inputs are not in this output (the tower
        # returns the pieces only); keye-encoder-rope's consumer covers them.
    ),
    Target(
        name="keye-process-image",
        upstream=(f"{_KEYE}::BaseKeyeModule._process_image_input",),
        legacy="legacy.keye:BaseKeyeModule._process_image_input",
        optimized="optimized.keye:BaseKeyeModule._process_image_input",
        inputs="strategies.keye.inputs:KeyeProcessImageInputs",
        comparison=Comparison(floats="exact", layout=True),
        # Position ids and sample indices go `.to(device, non_blocking=True)`
        # from small pageable tensors: staged by the driver without waiting
        # (measured, F4 corrected), so no sync. Left: the one
        # `image_grid_thw.tolist()` when the grid is on the device (keye_vl1_5
        # does not keep it on the CPU): 0 for keye.py, 1 for keye_vl1_5.
        expected_optimized_syncs=1,
        description="position ids / cu_seqlens / sample indices staged non-blocking; grid read once with tolist()",
        invariants=(
            "strategies.keye.oracles:keye_metadata_cu_seqlens_running_sum",
            "strategies.keye.oracles:keye_metadata_position_ids_follow_grid",
            "strategies.keye.oracles:keye_metadata_sample_indices_name_rows",
            "strategies.keye.oracles:keye_metadata_grids_are_host_ints",
        ),
        reference="strategies.keye.oracles:KEYE_METADATA",
        # The tower's attention reads the staged cu_seqlens (one layer's worth).
        consumer="strategies.keye.oracles:keye_tower_reads",
    ),
    Target(
        name="keye-process-video",
        upstream=(f"{_KEYE}::BaseKeyeModule._process_video_embeds",),
        legacy="legacy.keye:BaseKeyeModule._process_video_embeds",
        optimized="optimized.keye:BaseKeyeModule._process_video_embeds",
        inputs="strategies.keye.inputs:KeyeProcessVideoInputs",
        comparison=Comparison(floats="exact", layout=True),
        # The per-row `sub_thw.detach().cpu()` loop the PR left as it was: one
        # D2H sync per grid row when the grid is on the device (keye_vl1_5's
        # per-frame rows); the small pageable non-blocking copies are not
        # syncs (F4 corrected). 0 for keye.py; up to
        # strategies.keye.inputs.MAX_VIDEO_ROWS for keye_vl1_5, the bound used here.
        expected_optimized_syncs=4,
        description="position ids / cu_seqlens / sample indices staged non-blocking",
        invariants=(
            "strategies.keye.oracles:keye_metadata_cu_seqlens_running_sum",
            "strategies.keye.oracles:keye_metadata_position_ids_follow_grid",
            "strategies.keye.oracles:keye_metadata_sample_indices_name_rows",
            "strategies.keye.oracles:keye_metadata_grids_are_host_ints",
        ),
        reference="strategies.keye.oracles:KEYE_METADATA",
        consumer="strategies.keye.oracles:keye_tower_reads",
    ),
]
