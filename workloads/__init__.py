"""Built-in workloads. Each module defines factories `name(size, data_dir) -> Workload`;
`ddpbench.worker.workload.BUILTIN_WORKLOADS` maps names to them."""
