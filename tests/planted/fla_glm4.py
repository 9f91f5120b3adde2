"""Planted bugs and benign refactors for the FLA index helpers and glm4_1v."""

from tests.planted.plant import Plant

BUGS = [
    Plant("planted-offsets-off-by-one", "fla-chunk-offsets", "optimized.fla_index",
          "cu_seqlens.new_zeros(1)", "cu_seqlens.new_ones(1)",
          "every chunk offset shifted by one"),
    Plant("planted-indices-dropped-dtype", "fla-chunk-indices", "optimized.fla_index",
          "device=cu_seqlens.device, dtype=cu_seqlens.dtype, non_blocking=True",
          "device=cu_seqlens.device, non_blocking=True",
          "int32 cu_seqlens give an int64 table"),
    Plant("planted-indices-off-by-one", "fla-chunk-indices", "optimized.fla_index",
          "indices.eq(0).cumsum(0) - 1", "indices.eq(0).cumsum(0)",
          "sequence ids start at 1"),
    Plant("planted-glm4-wrong-modulo", "glm4v-embeddings", "optimized.glm4_1v",
          "np.arange(len(lengths)) % shapes_np.shape[0]",
          "np.minimum(np.arange(len(lengths)), shapes_np.shape[0] - 1)",
          "data-parallel cycling clamps to the last shape instead of wrapping"),
    Plant("planted-glm4-swapped-hw", "glm4v-embeddings", "optimized.glm4_1v",
          "np.repeat(shapes_np[shape_idx, 1], lengths)", "np.repeat(shapes_np[shape_idx, 2], lengths)",
          "target height taken from the width column (only visible when h != w)"),
    Plant("planted-glm4-reused-staging-buffer", "glm4v-embeddings", "optimized.glm4_1v",
          "from optimized.torch_utils import async_tensor_h2d",
          "from tests.racy import reused_buffer_h2d as async_tensor_h2d",
          "target_h and target_w staged through one reused host buffer without waiting"),
    Plant("planted-pos-embeds-no-repeat", "glm4v-pos-embeds", "optimized.glm4_1v",
          "async_tensor_h2d(w_coords.repeat(t), device=device)", "async_tensor_h2d(w_coords.repeat(1), device=device)",
          "w coordinates not repeated over frames (only visible when t > 1)"),
]

BENIGN = [
    Plant("benign-offsets-explicit-zeros", "fla-chunk-offsets", "optimized.fla_index",
          "cu_seqlens.new_zeros(1)", "torch.zeros(1, dtype=cu_seqlens.dtype, device=cu_seqlens.device)",
          "the same zero, spelled out"),
    Plant("benign-indices-to-like", "fla-chunk-indices", "optimized.fla_index",
          "return chunk_indices.to(\n        device=cu_seqlens.device, dtype=cu_seqlens.dtype, non_blocking=True\n    )",
          "return chunk_indices.to(cu_seqlens)",
          "the legacy spelling of the same copy"),
    Plant("benign-pos-embeds-w-times-h", "glm4v-pos-embeds", "optimized.glm4_1v",
          "lengths = [h * w] * t", "lengths = [w * h for _ in range(t)]",
          "the same frame lengths, built another way"),
    Plant("benign-glm4-column-first", "glm4v-embeddings", "optimized.glm4_1v",
          "np.repeat(shapes_np[shape_idx, 1], lengths)", "np.repeat(shapes_np[:, 1][shape_idx], lengths)",
          "select the column, then cycle: same values"),
]


# Same values, one extra GPU<->CPU sync: only the CUDA sync oracle can see it.
SYNC_BUGS = [
    Plant("planted-offsets-extra-sync", "fla-chunk-offsets", "optimized.fla_index",
          "cu_seqlens.new_zeros(1)", "cu_seqlens.new_zeros(1) * int(cu_seqlens[:1].sum().item() == 0)",
          "reads cu_seqlens[0] back to the host (always 0, so values are unchanged)"),
]

# Invisible to a plain run: the output aliases a caller-owned host buffer, so
# only poisoning the caller's inputs after return (--stress) shows it.
STRESS_BUGS = [
    Plant("planted-glm4-output-aliases-input", "glm4v-embeddings", "optimized.glm4_1v",
          "embeddings = embeddings + adapted_pos_embed", "embeddings += adapted_pos_embed",
          "adds in place: the result is the caller's embeddings buffer"),
]

BUGS.append(Plant("planted-shim-dropped-dtype", "async-tensor-h2d", "optimized.torch_utils",
                  "return t.to(device=device, dtype=dtype, non_blocking=True)",
                  "return t.to(device=device, non_blocking=True)",
                  "a tensor or array keeps its own dtype when one is asked for"))
BENIGN.append(Plant("benign-shim-keyword-order", "async-tensor-h2d", "optimized.torch_utils",
                    "return t.to(device=device, dtype=dtype, non_blocking=True)",
                    "return t.to(dtype=dtype, device=device, non_blocking=True)",
                    "the same call, keywords reordered"))
