"""Records and traces into numbers and DataFrames. No torch: results can be studied anywhere."""
