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
        self._backend = backend
        vocab = backend.get_vocab()
        # Computed once: scanning a 73k vocabulary per request would cost more than tokenizing.
        self._cjk_words = frozenset(token for token in vocab if _is_cjk_word(token))

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

    def tokenize(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        pieces: list[str] = []
        for token in self._backend.tokenize(text):
            bare = token.replace(_SPACE_MARK, "")
            # The word-start marker is dropped along with the split, as in training.
            if bare in self._cjk_words:
                pieces.extend(bare)
            else:
                pieces.append(token)
        return pieces

    def encode(self, text: str) -> list[int]:
        return list(self._backend.convert_tokens_to_ids(self.tokenize(text)))
