"""Built-in workloads. Each module defines factories `name(size, data_dir) -> Workload`;
`ddpbench.config.workloads.BUILTIN_WORKLOADS` maps names to them."""
