"""Bugs planted in both copies of keye and paddleocr_vl at once: legacy and
optimized agree on them, so only the targets' invariants and references
(fuzz/oracles/keye.py, fuzz/oracles/paddleocr_vl.py) can report them."""

from tests.planted.plant import SharedPlant

_LEGACY_KEYE, _OPT_KEYE = "legacy.keye", "optimized.keye"
_LEGACY_PADDLE, _OPT_PADDLE = "legacy.paddleocr_vl", "optimized.paddleocr_vl"

# The video loop's lines, with the line before them so `old` is unique (the
# image loop has the same last two lines).
_VIDEO_CU = ("siglip_position_ids.append(video_position_ids)\n"
             "            sample_indices.append(torch.full((numel,), idx, dtype=torch.int64))\n"
             "            cu_seqlens.append(cu_seqlens[-1] + numel)")
_VIDEO_CU_BUG = ("siglip_position_ids.append(video_position_ids)\n"
                 "            sample_indices.append(torch.full((numel,), idx, dtype=torch.int64))\n"
                 "            cu_seqlens.append(numel)")
_PADDLE_IDS = "sample_hids = image_pids // w\n                sample_wids = image_pids % w"
_PADDLE_IDS_BUG = "sample_hids = image_pids // h\n                sample_wids = image_pids % h"

SHARED_BUGS = [
    SharedPlant(
        "shared-keye-split-squeezes-wrong-dim", "keye-vision-split",
        legacy=(_LEGACY_KEYE, "tensor = last_hidden_state[:, start:end, :].squeeze(0)",
                "tensor = last_hidden_state[:, start:end, :].squeeze(1)"),
        optimized=(_OPT_KEYE, "tensor.squeeze(0) for tensor in last_hidden_state.split(split_sizes, dim=1)",
                   "tensor.squeeze(1) for tensor in last_hidden_state.split(split_sizes, dim=1)"),
        why="the batch dimension is squeezed at the token axis: pieces stay [1, n, hidden] (caught by "
            "keye_split_covers_sequence)",
    ),
    SharedPlant(
        "shared-keye-rope-repeat-interleaved", "keye-encoder-rope",
        legacy=(_LEGACY_KEYE, "rope_emb = rope_emb.repeat(1, 2)", "rope_emb = rope_emb.repeat_interleave(2, dim=1)"),
        optimized=(_OPT_KEYE, "rope_emb = rope_emb.repeat(1, 2)", "rope_emb = rope_emb.repeat_interleave(2, dim=1)"),
        why="rope columns interleaved ([a, a, b, b]) instead of tiled ([a, b, a, b]): the rotate-half "
            "halves no longer match (caught by the reference, same shape)",
    ),
    SharedPlant(
        "shared-keye-video-cu-seqlens-not-accumulated", "keye-process-video",
        legacy=(_LEGACY_KEYE, _VIDEO_CU, _VIDEO_CU_BUG),
        optimized=(_OPT_KEYE, _VIDEO_CU, _VIDEO_CU_BUG),
        why="cu_seqlens gets each row's size, not the running sum (visible with two grid rows or more; "
            "caught by keye_metadata_cu_seqlens_running_sum)",
    ),
    SharedPlant(
        "shared-paddleocr-ids-split-by-height", "paddleocr-encoder",
        legacy=(_LEGACY_PADDLE, _PADDLE_IDS, _PADDLE_IDS_BUG),
        optimized=(_OPT_PADDLE, _PADDLE_IDS, _PADDLE_IDS_BUG),
        why="patch ids divided by the height instead of the width: not row-major (h, w) when h != w, yet "
            "inside the table (caught by the reference)",
    ),
]
