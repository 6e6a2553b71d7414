"""The tiny checkpoint's tokenizer: a small Llama-style BPE vocabulary in the official file layout,
with multi-character Chinese tokens so that the official splitting rule is exercised."""
from __future__ import annotations

import json
from pathlib import Path

AUDIO_SPECIAL_TOKENS = {101: "<|audio_start|>", 102: "<|audio_end|>",
                        103: "<|ref_audio_start|>", 104: "<|ref_audio_end|>"}
WORD_MARK = "\u2581"  # sentencepiece's "▁"

_HAN_CHARS = ("你好世界我们今天气很是的一个语音合成测试欢迎中国人说话声大家早上晚安谢这在有和了不"
              "来去看听笑温柔明亮慢快高低男女老少春夏秋冬山水风雨花")
# Multi-character Han tokens: the official wrapper splits these into single characters. "▁欢迎"
# exists without "欢迎", so the wrapper must keep it whole (it only splits known Han tokens).
_HAN_WORDS = ["▁你好", "你好", "世界", "我们", "今天", "天气", "语音合成", "测试", "中国", "大家",
              "谢谢", "▁欢迎", "早上好"]
_ENGLISH_WORDS = ["▁the", "▁a", "▁is", "▁this", "▁hello", "▁Hello", "▁world", "▁and", "▁to", "▁of",
                  "▁in", "▁it", "▁voice", "▁speak", "▁test", "▁I", "▁you", "▁we", "▁for", "▁with",
                  "▁warm", "▁calm", "▁female", "▁male", "▁slow", "▁fast", "▁happy", "▁good",
                  "▁morning", "▁day", "▁today", "▁weather", "ing", "ed", "er", "ly", "▁sentence"]




def vocabulary() -> tuple[list[str], list[tuple[str, str]]]:
    """Token list (index = id) and BPE merges that build every multi-character token."""
    ascii_chars = [chr(c) for c in range(33, 127)]
    base = ["<unk>", "<s>", "</s>", WORD_MARK] + ascii_chars + ["，", "。", "！"]
    assert len(base) <= 101, "ids 101-104 are reserved for the audio tokens"
    base += [f"<reserved_{i}>" for i in range(len(base), 101)]
    vocab = base + [AUDIO_SPECIAL_TOKENS[i] for i in range(101, 105)] + list(dict.fromkeys(_HAN_CHARS))
    merges: list[tuple[str, str]] = []
    known = set(vocab)
    for word in _ENGLISH_WORDS + _HAN_WORDS:
        # Left-to-right merges: every prefix becomes a token, so BPE can always reach the word.
        for end in range(2, len(word) + 1):
            left, right, whole = word[:end - 1], word[end - 1], word[:end]
            if (left, right) not in merges and whole not in known:
                merges.append((left, right))
                vocab.append(whole)
                known.add(whole)
    return vocab, merges


def write_tokenizer(directory) -> int:
    """Write tokenizer.json / tokenizer_config.json / special_tokens_map.json; returns vocab size."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    directory = Path(directory)
    vocab, merges = vocabulary()
    # transformers 5 rebuilds Llama tokenizers as BPE + Metaspace("first"), ignoring the file's
    # pipeline; writing that same pipeline keeps tokenizers.Tokenizer.from_file identical to it.
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(vocab)}, merges=merges,
                               unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_MARK, prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace(WORD_MARK, " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    # Like Llama, encode() with special tokens prepends <s>; the model must never see it (the
    # official wrapper tokenizes without special tokens), so an engine that adds it fails parity.
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    specials = ["<unk>", "<s>", "</s>"] + list(AUDIO_SPECIAL_TOKENS.values())
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    tok.save(str(directory / "tokenizer.json"))
    added = {str(vocab.index(t)): {"content": t, "lstrip": False, "rstrip": False, "normalized": False,
                                   "single_word": False, "special": True} for t in specials}
    config = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "legacy": False,
              "clean_up_tokenization_spaces": False, "model_max_length": 8192,
              "added_tokens_decoder": added}
    special_map = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                   "additional_special_tokens": list(AUDIO_SPECIAL_TOKENS.values())}
    write_json(directory / "tokenizer_config.json", config)
    write_json(directory / "special_tokens_map.json", special_map)
    return len(vocab)


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
