"""`python -m parley`: the `parley` command."""

from parley.cli.main import app

app()
