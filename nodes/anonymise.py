"""One anonymiser: hide who said what from a judge or an arbitrator, and put the names back in its answer.

    >>> names = Anonymiser({"Ada": "Speaker A", "Bob": "Speaker B"})
    >>> names.hide("Ada thinks Bob is wrong")
    'Speaker A thinks Speaker B is wrong'
    >>> names.reveal("Speaker B wins")
    'Bob wins'

`whole_words` and `ignore_case` replace a name only where it stands as a word, whatever its case (a
model id inside an answer: "as gpt-5, I ..."); by default a name is replaced wherever it occurs, as
written (a speaker's name in a debate transcript).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping


class Anonymiser:
    """Replace names with labels (`hide`) and labels with names (`reveal`).

    Args:
        names: each name and the label it goes by; names shorter than `min_length` are left alone.
        whole_words: replace a name only where no word character (or `.`, `-`) touches it.
        ignore_case: match names whatever their case.
        min_length: the shortest name replaced (shorter ones would hit ordinary words).
    """

    def __init__(
        self,
        names: Mapping[str, str],
        *,
        whole_words: bool = False,
        ignore_case: bool = False,
        min_length: int = 2,
    ) -> None:
        self.labels = dict(names)
        self.names = {name: label for name, label in names.items() if len(name) >= min_length}
        self.whole_words, self.ignore_case = whole_words, ignore_case

    @classmethod
    def redacting(cls, names: Iterable[str], label: str, *, min_length: int = 3) -> Anonymiser:
        """Hide every one of `names` behind the same `label`, longest first, as whole words of any case."""
        ordered = sorted(set(names), key=len, reverse=True)
        return cls(dict.fromkeys(ordered, label), whole_words=True, ignore_case=True, min_length=min_length)

    def hide(self, text: str) -> str:
        """`text` with every name replaced by its label."""
        for name, label in self.names.items():
            if self.whole_words:
                flags = re.IGNORECASE if self.ignore_case else 0
                text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", lambda _, label=label: label, text, flags=flags)
            elif self.ignore_case:
                text = re.sub(re.escape(name), lambda _, label=label: label, text, flags=re.IGNORECASE)
            else:
                text = text.replace(name, label)
        return text

    def reveal(self, text: str) -> str:
        """`text` with every label replaced by its name (labels shared by several names are left)."""
        labels = list(self.labels.values())
        shared = {label for label in labels if labels.count(label) > 1}
        for name, label in self.labels.items():
            if label not in shared:
                text = text.replace(label, name)
        return text
