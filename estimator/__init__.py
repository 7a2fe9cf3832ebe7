"""estimator room."""
