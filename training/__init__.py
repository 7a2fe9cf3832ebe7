"""training room."""
