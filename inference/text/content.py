"""Whether a text says anything at all: the test every text field of a request passes."""
from __future__ import annotations

import unicodedata

# Unicode categories that say nothing on their own: separators (Z*), controls, format characters
# such as zero-width spaces and bidi marks, surrogates, private use, unassigned (C*), and combining
# marks (M*), which only modify a letter. Text made only of these is as empty as whitespace.
_SILENT_CATEGORIES = ("Z", "C", "M")


def has_content(text: str) -> bool:
    """True when the text holds at least one letter, digit, punctuation mark or symbol."""
    return any(unicodedata.category(ch)[0] not in _SILENT_CATEGORIES for ch in text)
