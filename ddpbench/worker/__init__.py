"""The per-rank training process and everything it runs: the only package besides `workloads/`
that imports torch. Started as `python -m ddpbench.worker` by the launcher."""
