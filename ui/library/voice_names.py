"""What a saved voice may be called: short, printable, unambiguous, and safe in a URL path.

Names are shown in the page and sent by OpenAI clients as `voice`, so they are words, not paths:
letters and digits of any script, spaces, and - _ . ' between them. They are compared without
regard to ASCII case (SQLite's NOCASE; `name_key`), so "Anna" and "anna" cannot both exist, while
"Strauß" and "Strauss", or "Éva" and "éva", can.

Every name a client sends, to save, find, rename or delete a voice, is first put in one form
(`normal_name`: composed letters, no spaces around it), so " Anna " and a decomposed "Zoë" find the
voice they were saved as.
"""
from __future__ import annotations

import re
import unicodedata

from inference.errors import InputError

MAX_NAME = 64
# "design" means voice design on the OpenAI route (ui/http/openai.py), so no saved voice may take it.
RESERVED = ("design", "default")  # /v1's voice names: a voice designed from `instructions`, and VoxCPM2 with no voice prompt
_NAME = re.compile(r"[^\W_](?:[\w .'-]*[^\W_])?")
RULE = (f"1 to {MAX_NAME} characters: letters or digits (any script), with spaces, - _ . ' between them; "
        f"not {', '.join(RESERVED)}")


def normal_name(name: str) -> str:
    """The one form a name is saved and looked up in: composed (NFC), without spaces around it."""
    return unicodedata.normalize("NFC", name).strip()


def check_name(name) -> str:
    """The name in its normal form, or an InputError that states the rule."""
    if not isinstance(name, str):
        raise InputError(f"a voice name must be text: {RULE}")
    name = normal_name(name)
    if not name or len(name) > MAX_NAME or not _NAME.fullmatch(name) or "  " in name:
        shown = name[:MAX_NAME] + ("…" if len(name) > MAX_NAME else "")
        raise InputError(f"the voice name {shown!r} is not usable: {RULE}")
    if name.casefold() in RESERVED:
        raise InputError(f"the voice name {name!r} is reserved: {RULE}")
    return name


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def name_key(name: str) -> str:
    """What two names that may not both exist share: the name with its ASCII letters in lower case,
    as SQLite's NOCASE compares them. A shared store (pg_voice_store.py) keeps it, unique."""
    return normal_name(name).translate(_ASCII_LOWER)


def same_name(a: str, b: str) -> bool:
    """Whether two names are one voice's, by the stores' own rule (name_key), so a rename may change
    only the ASCII case. Every "same name" question goes through here or name_key: Python's
    casefold() or lower() would call Strauß and Strauss one name, which the stores do not."""
    return name_key(a) == name_key(b)
