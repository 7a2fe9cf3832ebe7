"""features room."""
