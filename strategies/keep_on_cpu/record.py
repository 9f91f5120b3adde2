"""docs/design.md row 12: consumers of the multimodal fields PR #52369 marks
``keep_on_cpu=True`` (legacy gets the field on the device, optimized on the host;
see strategies/keep_on_cpu/inputs.py for the side rule).

Every qualname in ``upstream`` is entered on each side whose copy holds it: the
input models call the side's own ``_get_mm_fields_config`` (keye's through
``_keye_field_config``) to decide where the field goes, then the consumer; the
0.27.1-only names run on the legacy side, the 0.28.0-only ones on the optimized."""

from fuzz.api import Comparison, Target

# The optimized copies' gpu_sync_allowed() regions: syncs inside them are upstream's deliberate ones.
ALLOW_REGION = "optimized.gpu_sync_debug:sync_allowed_depth"

DESIGN_ROWS = (12,)
_MODELS = "vllm/model_executor/models"
_ULTRAVOX = f"{_MODELS}/ultravox.py"
_INTERNS1 = f"{_MODELS}/interns1.py"
_PHI4MM = f"{_MODELS}/phi4mm.py"
_KEYE = f"{_MODELS}/keye.py"
_MM_ATTN = "vllm/model_executor/layers/attention/mm_encoder_attention.py"

TARGETS = [
    Target(
        name="keep-on-cpu-ultravox-audio-lens",
        upstream=(
            f"{_ULTRAVOX}::UltravoxMultiModalProcessor._get_mm_fields_config",
            f"{_ULTRAVOX}::UltravoxModel._audio_features_to_embeddings",
            f"{_ULTRAVOX}::UltravoxWhisperEncoder.forward",
            f"{_ULTRAVOX}::_build_chunk_attn_metadata",
            f"{_MM_ATTN}::MMEncoderAttention.compute_max_seqlen",
            f"{_MM_ATTN}::MMEncoderAttention.maybe_recompute_cu_seqlens",
            # 0.27.1 names of the same consumer:
            f"{_ULTRAVOX}::ModifiedWhisperEncoder.forward",
            f"{_ULTRAVOX}::ModifiedWhisperEncoder.get_attention_mask_by_audio_len",
        ),
        legacy="legacy.keep_on_cpu:UltravoxModel._audio_features_to_embeddings",
        optimized="optimized.keep_on_cpu:UltravoxModel._audio_features_to_embeddings",
        inputs="strategies.keep_on_cpu.inputs:UltravoxAudioLensInputs",
        sync_allow_region=ALLOW_REGION,
        # The two versions attend through different metadata (dense mask vs
        # cu_seqlens segments): same keys per valid query, other summation order.
        comparison=Comparison(floats="close"),
        # audio_lens is read on the host (.cpu().numpy()) -- free when it is
        # kept there; cu_seqlens goes up pinned + non_blocking.
        expected_optimized_syncs=0,
        description="audio_lens kept on CPU: encoder cu_seqlens built on the host instead of a device key-padding mask",
        invariants=(
            "strategies.keep_on_cpu.oracles:ultravox_one_piece_per_chunk",
            "strategies.keep_on_cpu.oracles:ultravox_valid_frames_finite",
        ),
        # The stand-in whisper layers make the attention's host reads themselves, during
        # the call (vit_attn_wrappers.py `max_seqlen.item()` -- a host tensor in 0.28.0 --
        # and torch_sdpa_wrapper's `(cu_seqlens[1:] - cu_seqlens[:-1]).tolist()` of the
        # device cu_seqlens); naming the consumer reports them as consumer syncs.
        consumer="strategies.keep_on_cpu.oracles:ultravox_attention_reads",
    ),
    Target(
        name="keep-on-cpu-interns1-num-patches",
        upstream=(
            f"{_INTERNS1}::InternS1MultiModalProcessor._get_mm_fields_config",
            f"{_INTERNS1}::InternS1ForConditionalGeneration.embed_multimodal",
            f"{_INTERNS1}::InternS1ForConditionalGeneration._parse_and_validate_image_input",
            f"{_INTERNS1}::InternS1ForConditionalGeneration._parse_and_validate_video_input",
            f"{_INTERNS1}::InternS1ForConditionalGeneration._process_vision_input",
        ),
        legacy="legacy.keep_on_cpu:InternS1ForConditionalGeneration.embed_multimodal",
        optimized="optimized.keep_on_cpu:InternS1ForConditionalGeneration.embed_multimodal",
        inputs="strategies.keep_on_cpu.inputs:InternS1NumPatchesInputs",
        sync_allow_region=ALLOW_REGION,
        comparison=Comparison(floats="exact"),
        # token_id .unique().item() and the num_patches split sizes are host reads of CPU tensors.
        expected_optimized_syncs=0,
        description="image/video_num_patches and *_token_id kept on CPU: split sizes and token ids read on the host",
        invariants=(
            "strategies.keep_on_cpu.oracles:interns1_one_piece_per_item",
            "strategies.keep_on_cpu.oracles:interns1_context_token_ids",
        ),
        reference="strategies.keep_on_cpu.oracles:INTERNS1_REFERENCE",
        # No consumer: the per-item embeddings go to the language model's merge,
        # vllm/model_executor/models/utils.py _merge_multimodal_embeddings:
        # `inputs_embeds.masked_scatter_(is_multimodal.unsqueeze(-1), mm_embeds_flat...)`,
        # device ops only ("This can avoid D2H sync"); the context token ids are ints.
    ),
    Target(
        name="keep-on-cpu-phi4mm-image-sizes",
        upstream=(
            f"{_PHI4MM}::Phi4MMMultiModalProcessor._get_mm_fields_config",
            f"{_PHI4MM}::Phi4MMForCausalLM.embed_multimodal",
            f"{_PHI4MM}::Phi4MMForCausalLM._process_image_input",
            f"{_PHI4MM}::Phi4MMImageEncoder.forward",
            f"{_PHI4MM}::stack_with_pad",
        ),
        legacy="legacy.keep_on_cpu:Phi4MMForCausalLM.embed_multimodal",
        optimized="optimized.keep_on_cpu:Phi4MMForCausalLM.embed_multimodal",
        inputs="strategies.keep_on_cpu.inputs:Phi4MMImageSizesInputs",
        sync_allow_region=ALLOW_REGION,
        comparison=Comparison(floats="exact"),
        # Three .item() per image on the (device) attention mask, kept under
        # gpu_sync_allowed; image_sizes itself is read on the host. Per example
        # 3 x images (sync_budget); 9 bounds the largest batch drawn
        # (strategies.keep_on_cpu.inputs.PHI4MM_MAX_IMAGES = 3).
        expected_optimized_syncs=9,
        sync_budget="strategies.keep_on_cpu.inputs:phi4mm_sync_budget",
        description=("image_sizes kept on CPU: crop counts and slicing from host ints; "
                     "mask counts under gpu_sync_allowed"),
        invariants=(
            "strategies.keep_on_cpu.oracles:phi4mm_one_embedding_per_image",
            "strategies.keep_on_cpu.oracles:phi4mm_tokens_follow_crops",
        ),
        # No consumer: the per-image embeddings go to the language model's merge,
        # vllm/model_executor/models/utils.py _merge_multimodal_embeddings (a device
        # masked_scatter_); nothing reads them on the host.
    ),
    Target(
        name="keep-on-cpu-keye-grid-thw",
        upstream=(
            f"{_KEYE}::KeyeMultiModalProcessor._get_mm_fields_config",
            f"{_KEYE}::_keye_field_config",
            f"{_KEYE}::BaseKeyeModule.embed_multimodal",
            f"{_KEYE}::BaseKeyeModule._process_image_input",
            f"{_KEYE}::BaseKeyeModule._process_video_embeds",
            f"{_KEYE}::KeyeForConditionalGeneration._process_video_input",
            f"{_KEYE}::Projector.forward",
        ),
        legacy="legacy.keep_on_cpu:KeyeForConditionalGeneration.embed_multimodal",
        optimized="optimized.keep_on_cpu:KeyeForConditionalGeneration.embed_multimodal",
        inputs="strategies.keep_on_cpu.inputs:KeyeGridThwInputs",
        sync_allow_region=ALLOW_REGION,
        comparison=Comparison(floats="exact", layout=True),
        # The grid .tolist()/.cpu() and the projector's reshape sizes read CPU
        # tensors (no sync); position ids and sample indices are small pageable
        # tables staged non-blocking, which the driver does without waiting
        # (F4 corrected), and cu_seqlens goes up pinned: no sync at all.
        expected_optimized_syncs=0,
        description=("image/video_grid_thw kept on CPU: grid read on the host for ids, cu_seqlens and the "
                     "projector reshape"),
        invariants=(
            "strategies.keep_on_cpu.oracles:keye_embeddings_follow_grid",
            "strategies.keep_on_cpu.oracles:keye_tower_cu_seqlens",
            "strategies.keep_on_cpu.oracles:keye_tower_position_ids",
        ),
        # The tower's attention reads max_seqlen (computed from the device
        # cu_seqlens) with .item() once per encoder layer.
        consumer="strategies.keep_on_cpu.oracles:keye_attention_reads",
    ),
]
