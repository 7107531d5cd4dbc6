"""Names the launcher and the ranks both use to talk through the environment and the run's log
folder: defined once, below both, so that neither side imports the other for them."""

LAUNCHED_AT_ENV = "DDPBENCH_LAUNCHED_AT"
"""When the launcher started a run's processes (seconds since the epoch): each rank's start-up."""
HEARTBEAT_ENV = "DDPBENCH_HEARTBEAT_DIR"
"""The launcher tells the workers where to write their heartbeats through this variable."""
HANG_DUMPS_FOLDER = "hang-dumps"
"""Beside `heartbeats/` in the run's log folder: the stacks and Flight Recorder dumps of a hang."""
