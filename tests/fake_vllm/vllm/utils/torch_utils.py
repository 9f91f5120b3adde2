from fuzz.upstream_shims import async_tensor_h2d  # noqa: F401
