"""The regression gate: compare a candidate sweep with a baseline. No torch."""
