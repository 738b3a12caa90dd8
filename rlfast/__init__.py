"""rlfast: high-throughput deep RL for PyTorch."""
__version__ = "0.1.0"
