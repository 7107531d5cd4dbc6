"""ddpbench: benchmark PyTorch DistributedDataParallel training and how it scales."""

__version__ = "0.1.0"
