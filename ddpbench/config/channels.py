"""Names the launcher and the ranks both use to talk through the environment and the run's log
folder: defined once, below both, so that neither side imports the other for them."""

LAUNCHED_AT_ENV = "DDPBENCH_LAUNCHED_AT"
"""When the launcher started a run's processes (seconds since the epoch): each rank's start-up."""
HEARTBEAT_ENV = "DDPBENCH_HEARTBEAT_DIR"
"""The launcher tells the workers where to write their heartbeats through this variable."""
HANG_DUMPS_FOLDER = "hang-dumps"
"""Beside `heartbeats/` in the run's log folder: the stacks and Flight Recorder dumps of a hang."""
RANK_EXIT_LINE = "ddpbench.worker.agent: rank {rank} (local_rank: {local_rank}) ended with exit code {code}"
"""What ddpbench's agent prints in the run's output for every rank of a forked group that had failed
when the failure was found, where torchrun's summary names only one
(`ddpbench.worker.agent.report_rank_exits`)."""
