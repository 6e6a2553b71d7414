"""Text to token ids, the way VoxCPM2 was trained to read it.

The checkpoint ships a Llama-style BPE tokenizer whose vocabulary holds many multi-character
Chinese words. VoxCPM2 was trained on Chinese read one character per token, so every such word
token is broken back into its characters before the ids are looked up; skipping that step makes
Chinese come out as another dialect or as noise.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import CheckpointError

_SPACE_MARK = "\u2581"  # the tokenizer's "▁" word-start marker
_WHITESPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Collapse every run of whitespace (newlines included) to one space, without stripping.

    This is all the official wrapper does to the target text before synthesis; the ends are kept
    because a leading space changes the first token.
    """
    return _WHITESPACE.sub(" ", text)


def _is_cjk_word(token: str) -> bool:
    return len(token) >= 2 and all("\u4e00" <= ch <= "\u9fff" for ch in token)


class TextTokenizer:
    """Wraps the checkpoint's tokenizer; `encode` gives ids without BOS or EOS."""

    def __init__(self, backend):
        from tokenizers import Tokenizer

        self._backend = backend
        # Encoded by the Rust tokenizer itself, as transformers' tokenize does underneath (no
        # truncation, no padding, special tokens kept whole), without the 10-30 us of Python that
        # transformers adds to each call: a live session tokenizes every clause after up to
        # TAIL_REACH clauses before it, on the interpreter the event loop and the engine share.
        # A copy, so that the wrapper's own settings are not touched.
        self._rust = Tokenizer.from_str(backend.backend_tokenizer.to_str())
        self._rust.no_truncation()
        self._rust.no_padding()
        self._rust.encode_special_tokens = bool(backend.split_special_tokens)
        vocab, unk = backend.get_vocab(), backend.unk_token_id
        # Computed once: scanning a 73k vocabulary per request would cost more than tokenizing. The
        # id of each token that is broken up (with or without the word-start marker, which goes with
        # the split, as in training: only words the vocabulary holds bare) and its characters' ids.
        cjk_words = {token for token in vocab if _is_cjk_word(token)}
        self._splits = {index: [vocab.get(ch, unk) for ch in token.replace(_SPACE_MARK, "")]
                        for token, index in vocab.items() if token.replace(_SPACE_MARK, "") in cjk_words}

    @classmethod
    def from_dir(cls, path: str | Path) -> "TextTokenizer":
        folder = Path(path)
        if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer.model").is_file():
            raise CheckpointError(
                f"no tokenizer in {folder}: looked for tokenizer.json (or tokenizer.model) beside "
                "config.json; use the complete checkpoint folder"
            )
        # The same class the official loader uses, so the same transformers version gives the same
        # pre-tokenization (Metaspace, byte fallback) as the reference.
        from transformers import LlamaTokenizerFast

        try:
            backend = LlamaTokenizerFast.from_pretrained(str(folder))
        except Exception as exc:  # transformers raises many types for a broken folder
            raise CheckpointError(f"cannot load the tokenizer in {folder}: {exc}") from exc
        return cls(backend)

    @property
    def vocab_size(self) -> int:
        return len(self._backend)

    def _encoded(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._rust.encode(text, add_special_tokens=False)

    def tokenize(self, text: str) -> list[str]:
        pieces: list[str] = []
        encoding = self._encoded(text)
        for token, index in zip(encoding.tokens, encoding.ids):
            if index in self._splits:
                pieces.extend(token.replace(_SPACE_MARK, ""))
            else:
                pieces.append(token)
        return pieces

    def encode(self, text: str) -> list[int]:
        ids = self._encoded(text).ids
        if self._splits.keys().isdisjoint(ids):  # no Chinese word to break up: the ids as they are
            return ids
        out: list[int] = []
        for index in ids:
            chars = self._splits.get(index)
            if chars is None:
                out.append(index)
            else:
                out.extend(chars)
        return out
