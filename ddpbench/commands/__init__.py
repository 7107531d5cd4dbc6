"""The subcommands of `ddpbench` beside the core ones in `ddpbench.cli`, and what they share. No torch."""
