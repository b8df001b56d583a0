"""Graph attention blocks (PyG ``MessagePassing``), registered in ``GRAPH_LAYERS``."""
