"""`nodes.models.model_family`, a public name since Parley 0.1 (`../shared/CONTRACT.md`), kept where users find it.

The model layer itself is the package `llm/` (`llm.families.model_family` is this function); import from there in
new code.
"""

from llm.families import model_family

__all__ = ["model_family"]
