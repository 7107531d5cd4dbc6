"""The run record: its types, the one writer and the one loader. No torch."""
