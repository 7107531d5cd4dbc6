"""`ddpbench run --script`: the user's own training script, run unmodified and measured from
the outside of its loop (the observer's hooks) on every rank."""
