"""designer."""
