"""Starting runs and sweeps, and finding out what went wrong when they fail. No torch: the
launcher only starts processes that import it."""
