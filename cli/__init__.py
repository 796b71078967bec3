"""The `parley` command line."""
