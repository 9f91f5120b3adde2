from optimized.torch_utils import async_tensor_h2d  # noqa: F401
