"""The subcommands of `ddpbench`, one module each with its options and handler (`ddpbench.cli`
only dispatches), and what they share (`arguments`). No torch."""
