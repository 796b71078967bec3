"""Deployment configuration and the embedded servers Parley starts when nothing is configured."""
