"""What people read: the HTML report, its plots, text summaries, and exports. No torch."""
