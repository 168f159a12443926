"""Reports: pure functions of results — the comparison table, the judge's tables, plots and diagnostics."""
