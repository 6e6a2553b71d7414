"""Written text to the words a speaker reads: numbers, dates, units and symbols spelled out.

Behaves like the official package's `normalize=True` option (voxcpm 2.0.3): the language is
decided by script (any CJK ideograph makes it Chinese), markdown syntax, emoji, line breaks and
curly double quotes are cleaned up, then WeText's grammars (which ship inside the `wetext`
wheel, so this works offline) verbalize Chinese or English, and for English `inflect` spells any
digits WeText left. The grammars take about half a second to load, so they load once, on first
use, and are shared by every thread (WeText's normalizers hold no per-call state).
"""
from __future__ import annotations

import re
import threading

import regex

_CJK = re.compile(r"[\u4e00-\u9fff]")
_EMOJI = regex.compile(r"\p{Emoji_Presentation}|\p{Emoji}\uFE0F")
# Markdown, in the order the official clean-up applies it: fenced code, inline code, images, links
# (their text kept), list dashes, HTML tags, heading marks, then blank lines.
_MARKDOWN = (
    (re.compile(r"```.*?```", re.DOTALL), ""),
    (re.compile(r"`[^`]*`"), ""),
    (re.compile(r"!\[[^\]]*\]\([^)]+\)"), ""),
    (re.compile(r"\[([^\]]+)\]\([^)]+\)"), r"\1"),
    (re.compile(r"^(\s*)-\s+", re.MULTILINE), r"\1"),
    (re.compile(r"<[^>]+>"), ""),
    (re.compile(r"^#{1,6}\s*", re.MULTILINE), ""),
    (re.compile(r"\n\s*\n"), "\n"),
)
# In Chinese text WeText reads "x-2" as "x minus 2"; spaced out it reads the dash as a hyphen.
_MATH_SIGNS = re.compile(r"[\d$%^*_+≥≤≠×÷?=]")
_DASH_BEFORE_DIGIT = re.compile(r"(?<=[a-zA-Z0-9])-(?=\d)")
_DIGITS = re.compile(r"\d+")
# WeText's English grammar drops the leading "one" of a grouped number from 1,000 on ("1,250" reads
# "thousand two hundred and fifty", also in the official normalizer): such numbers, whole and with
# an optional currency sign, are spelled by inflect before WeText sees them.
_LEADING_ONE = re.compile(r"(?<![\d.,])(?P<sign>[$€£]?)(?P<number>1(?:,\d{3})+)(?![\d,]|\.\d)")
_CURRENCY = {"$": " dollars", "€": " euros", "£": " pounds", "": ""}
_SPACES = re.compile(r" {2,}")
# Symbols WeText's Chinese grammar leaves alone, and brackets nobody reads aloud.
_ZH_SYMBOLS = {"²": "平方", "³": "立方", "√": "根号", "≈": "约等于", "<": "小于",
               "（": " ", "）": " ", "【": " ", "】": " ", "`": "", "——": " "}
_ZH_SYMBOL_RE = re.compile("|".join(map(re.escape, sorted(_ZH_SYMBOLS, key=len, reverse=True))))


def language(text: str) -> str:
    """'zh' when the text holds a CJK ideograph, else 'en' (the official rule)."""
    return "zh" if _CJK.search(text) else "en"


def clean_text(text: str) -> str:
    """Markdown syntax and emoji out, line breaks and tabs to spaces, curly double quotes straight."""
    for pattern, replacement in _MARKDOWN:
        text = pattern.sub(replacement, text)
    text = _EMOJI.sub("", text.strip())
    return text.replace("\n", " ").replace("\t", " ").replace("\u201c", '"').replace("\u201d", '"')


class _Grammars:
    """WeText's Chinese and English normalizers and inflect's engine, loaded on first use."""

    def __init__(self):
        self._lock = threading.Lock()
        self._loaded = None

    def get(self):
        with self._lock:
            if self._loaded is None:
                import inflect
                from wetext import Normalizer

                self._loaded = (Normalizer(lang="zh", operator="tn", remove_erhua=True),
                                Normalizer(lang="en", operator="tn"), inflect.engine())
            return self._loaded


GRAMMARS = _Grammars()


def normalize(text: str, lang: str | None = None) -> str:
    """The text as it should be read. `lang` forces the language (a segment of a longer text is
    normalized in the whole text's language)."""
    lang = lang or language(text)
    text = clean_text(text)
    zh, en, numbers = GRAMMARS.get()
    if lang == "zh":
        return _verbalize_chinese(text, zh)
    text = _LEADING_ONE.sub(lambda m: _spell_grouped(m, numbers), text)
    text = _apply(en, text)
    return _DIGITS.sub(lambda m: numbers.number_to_words(m.group()), text)


def _spell_grouped(match: re.Match, numbers) -> str:
    words = numbers.number_to_words(int(match["number"].replace(",", ""))).replace(",", "")
    return words + _CURRENCY[match["sign"]]


def _apply(grammar, text: str) -> str:
    """WeText's verdict. Its token parser asserts on a run of spaces (left where an emoji or
    inline code was removed: the official normalizer fails there), so that is retried with single
    spaces; a text it still cannot verbalize is read as written rather than refused."""
    for attempt in (text, _SPACES.sub(" ", text)):
        try:
            return grammar.normalize(attempt)
        except Exception:  # AssertionError, IndexError... from WeText's token parser
            continue
    return text


def _verbalize_chinese(text: str, grammar) -> str:
    text = text.replace("=", "等于")  # WeText would otherwise read "550 + 320 = 870" as one number
    if _MATH_SIGNS.search(text):
        text = _DASH_BEFORE_DIGIT.sub(" - ", text)
    text = _drop_spaces_between_non_ascii(_apply(grammar, text))
    return _ZH_SYMBOL_RE.sub(lambda m: _ZH_SYMBOLS[m.group()], text)


def _drop_spaces_between_non_ascii(text: str) -> str:
    """A space stays only between two visible ASCII characters (English words inside Chinese);
    between Chinese characters it would be read as a pause."""
    kept = []
    for i, ch in enumerate(text):
        if ch != " ":
            kept.append(ch)
            continue
        before, after = text[i - 1] if i else " ", text[i + 1] if i + 1 < len(text) else " "
        if before.isascii() and before != " " and after.isascii() and after != " ":
            kept.append(ch)
    return "".join(kept)
