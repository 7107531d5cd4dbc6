"""What to run: run specs, sweep plans, fault and workload names. No torch: bad input fails here,
in milliseconds, before any process starts."""
