"""Written text to the words a speaker reads: numbers, dates, units and symbols spelled out.

Behaves like the official package's `normalize=True` option (voxcpm 2.0.3): the language is
decided by script (any CJK ideograph makes it Chinese), markdown syntax, emoji, line breaks and
curly double quotes are cleaned up, then WeText's grammars (which ship inside the `wetext`
wheel, so this works offline) verbalize Chinese or English, and for English `inflect` spells any
digits WeText left. The grammars take about half a second to load, so they load once, on first
use, and are shared by every thread (WeText's normalizers hold no per-call state).

`Normalizer` runs it for a served request in processes of their own: WeText's grammars run in C++
(kaldifst) that keeps the GIL for the whole call, 20-70 ms for a sentence, so a normalized text
stopped every other thread of the app for that long per segment: the engine's, which launches each
patch, and the event loop, which sends the audio.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import re
import threading
from concurrent.futures.process import BrokenProcessPool

import regex

from ..errors import InputError

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
# "thousand two hundred and fifty", also in the official normalizer) and says "and" in some groups
# but not others ("two thousand and twenty four", "two million two hundred fifty thousand"). It
# also reads money as a decimal ("$42.50": "forty two point five dollars"). So every whole grouped
# number and every amount after a currency sign is spelled by inflect before WeText sees it, one
# way ("and" before the tens of each group, as WeText says "twelve thousand three hundred and forty
# five"; "forty two dollars and fifty cents"). An amount glued to letters ("$1.5m") is left to
# WeText, which reads the scale ("one point five million dollars"). A comma or a point goes on with
# the number only before a digit: before anything else it is punctuation ("$42.50, please").
_AMOUNT = re.compile(r"""(?<![\d.,])
    (?:(?P<minus>(?<!\w)-)?(?<!\w)(?P<sign>[$€£¥]))?
    (?P<number>(?(sign)\d+|\d{1,3}(?=,\d{3}))(?:,\d{3})*)  # any number after a sign, else a grouped one
    (?P<fraction>\.\d+)?
    (?P<scale>\s(?i:thousand|million|billion|trillion))?
    (?!\d|[.,]\d)(?(sign)(?!\w))""", re.VERBOSE)
# A version number ("3.2.1"): WeText reads it "three.two point one". Three or more dotted parts,
# the last not a four-digit year (WeText reads "24.12.2024" as a date).
_DOTTED = re.compile(r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d.]|\.\d)")
# Unit abbreviations WeText leaves as written ("2 hrs", "1,200 m²"), after a number: (singular, plural).
_UNITS = {"hr": "hour", "hrs": "hour", "sec": "second", "secs": "second", "mins": "minute",
          "m²": "square meter", "km²": "square kilometer", "cm²": "square centimeter", "mm²": "square millimeter",
          "ft²": "square foot", "m³": "cubic meter", "cm³": "cubic centimeter", "ft³": "cubic foot"}
_UNIT_AFTER_NUMBER = re.compile(r"(?P<number>\d[\d,]*(?:\.\d+)?)\s*(?P<unit>" +
                                "|".join(map(re.escape, sorted(_UNITS, key=len, reverse=True))) + r")(?![\w²³])")
# A currency sign in English: (one, several, one hundredth, several hundredths); yen has no hundredths in use.
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
             "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", None, None)}
_SPACES = re.compile(r" {2,}")
# Money in Chinese text. Renminbi ("42.50元", "¥42.50") is read in 元, 角 and 分 (四十二元五角, where
# WeText reads 四十二点五零元); another currency as a decimal without its cents' trailing zero
# ("$42.50": 四十二点五美元, not 四十二点五零美元). Both are handed to WeText in a form it reads so.
# An amount without a sign before 百, 千, 万 or 亿 ("3.5万元") is left as written: WeText reads it.
# With a sign WeText misreads it ("¥50万": 五元零万, "$5000万": 五百美元零万, "¥3.5万": ¥三点五万), so
# the sign becomes the unit said after the scale, as people say and write it ("50万元", "5000万美元").
_ZH_SCALED_MONEY = re.compile(r"(?<![\d.,])(?P<sign>[$€£￡¥￥])(?P<number>\d{1,3}(?:,\d{3})+|\d+)(?P<fraction>\.\d+)?"
                              r"(?P<scale>[百千万亿]+)(?P<unit>美元|欧元|英镑|日元|港元|元)?")
_SIGN_UNITS = {"$": "美元", "€": "欧元", "£": "英镑", "￡": "英镑", "¥": "元", "￥": "元"}
_ZH_MONEY = re.compile(r"(?<![\d.,])(?P<sign>[$€£￡¥￥]?)(?P<number>\d{1,3}(?:,\d{3})+|\d+)(?P<fraction>\.\d{1,2})?"
                       r"(?P<unit>美元|欧元|英镑|日元|港元|元)?(?![\d百千万亿]|[.,]\d)")
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
    text = _UNIT_AFTER_NUMBER.sub(_unit_words, text)
    text = _DOTTED.sub(lambda m: " point ".join(_words(numbers, int(p)) for p in m.group().split(".")), text)
    text = _AMOUNT.sub(lambda m: _spell_amount(m, numbers), text)
    text = _apply(en, text)
    return _DIGITS.sub(lambda m: numbers.number_to_words(m.group()), text)


def normalize_all(pieces: list[str], lang: str) -> list[str]:
    """Each piece (a text's segments) normalized in `lang`, on this thread."""
    return [normalize(piece, lang) for piece in pieces]


def _load_grammars():
    GRAMMARS.get()


class Normalizer:
    """normalize_all in `processes` processes of its own (0: on the calling thread). The processes are
    spawned on first use (never forked: the app has CUDA and threads) and load the grammars once; each call is one round trip (a text's
    segments together), and the thread waiting for it lets go of the GIL. If a process dies the pool
    is made again and the text tried once more; a text that kills it twice is refused."""

    def __init__(self, processes: int):
        self.processes = processes
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def __call__(self, pieces: list[str], lang: str) -> list[str]:
        if not self.processes or not pieces:
            return normalize_all(pieces, lang)
        for _ in range(2):
            pool = self._started()
            try:
                return pool.submit(normalize_all, pieces, lang).result()
            except BrokenProcessPool:
                self._drop(pool)
        raise InputError("normalizing this text stopped the normalizer twice: send it with normalization off", "text")

    def start_soon(self) -> concurrent.futures.Future | None:
        """Starts the processes now, so that the first text does not wait for them to load the
        grammars (seconds); returns at once, with the future of a process's id once it has (None
        when there are no processes)."""
        return self._started().submit(os.getpid) if self.processes else None

    def worker_pid(self) -> int:
        """The id of a process that normalizes, once it has loaded the grammars (started if need be)."""
        return self.start_soon().result()

    def _started(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self.processes, mp_context=multiprocessing.get_context("spawn"), initializer=_load_grammars)
            return self._pool

    def _drop(self, pool: concurrent.futures.ProcessPoolExecutor):
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self):
        pool = self._pool
        if pool is not None:
            self._drop(pool)


def _words(numbers, n: int | str) -> str:
    """A number in words as WeText writes them: no commas, no hyphens ("twenty four", "three point five")."""
    return numbers.number_to_words(str(n)).replace(",", "").replace("-", " ")


def _spell_amount(match: re.Match, numbers) -> str:
    whole, fraction, sign = int(match["number"].replace(",", "")), (match["fraction"] or "")[1:], match["sign"]
    if not sign:  # "1,234.5 kg": WeText's, which reads the unit after it
        return match.group() if fraction else _words(numbers, whole)
    minus = "minus " if match["minus"] else ""
    return minus + _money(numbers, sign, whole, fraction.rstrip("0"), (match["scale"] or "").lower())


def _money(numbers, sign: str, whole: int, fraction: str, scale: str) -> str:
    """ "$42.50": forty two dollars and fifty cents; "$0.99": ninety nine cents; "$1": one dollar.
    A scale or a fraction finer than cents is a decimal ("$3.5 million": three point five million dollars)."""
    one, several, hundredth, hundredths = _CURRENCY[sign]
    if scale or len(fraction) > 2 or (fraction and hundredth is None):
        return f"{_words(numbers, f'{whole}.{fraction}' if fraction else whole)}{scale} {several}"
    cents = int(fraction.ljust(2, "0") or 0)
    said = [f"{_words(numbers, whole)} {one if whole == 1 else several}"] if whole or not cents else []
    if cents:
        said.append(f"{_words(numbers, cents)} {hundredth if cents == 1 else hundredths}")
    return " and ".join(said)


def _unit_words(match: re.Match) -> str:
    one = match["number"] == "1"
    name = _UNITS[match["unit"]]
    plural = name if one else ("square feet" if name == "square foot" else "cubic feet" if name == "cubic foot" else name + "s")
    return f"{match['number']} {plural}"


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
    text = _ZH_SCALED_MONEY.sub(lambda m: m["number"].replace(",", "") + (m["fraction"] or "") + m["scale"]
                                + (m["unit"] or _SIGN_UNITS[m["sign"]]), text)
    text = _ZH_MONEY.sub(_chinese_money, text)
    text = _drop_spaces_between_non_ascii(_apply(grammar, text))
    return _ZH_SYMBOL_RE.sub(lambda m: _ZH_SYMBOLS[m.group()], text)


def _chinese_money(match: re.Match) -> str:
    sign, number, unit = match["sign"], match["number"].replace(",", ""), match["unit"]
    fraction = (match["fraction"] or ".")[1:]
    if unit == "元" or (sign in ("¥", "￥") and not unit):
        return _yuan(number, fraction)
    if not (sign or unit):  # a number, not money
        return match.group()
    cents = fraction.rstrip("0")
    return f"{sign}{number}{'.' + cents if cents else ''}{unit or ''}"


def _yuan(number: str, fraction: str) -> str:
    """ "42.50" as 42元5角, "3.05" as 3元零5分, "0.5" as 5角: WeText reads each part's digits."""
    jiao, fen = fraction.ljust(2, "0")
    said = f"{number}元" if int(number) or not int(jiao + fen) else ""
    if jiao != "0":
        said += f"{jiao}角"
    elif fen != "0" and said:
        said += "零"
    return said + (f"{fen}分" if fen != "0" else "")


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
