"""Tokenization: multi-character Chinese words split into characters, no BOS/EOS, text normalizing."""
import importlib.util
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from inference.errors import CheckpointError
from inference.text.tokenizer import TextTokenizer, normalize_text

_CHARS = ["▁", "你", "好", "世", "界", "再", "见", "㐀", "㐁", "，", "h", "i"]
# "再见" exists only with the word-start marker, so it must stay whole; "㐀㐁" is outside U+4E00-U+9FFF.
_MERGES = [("你", "好"), ("世", "界"), ("▁", "你好"), ("▁", "世界"), ("▁", "再"), ("▁再", "见"),
           ("㐀", "㐁"), ("h", "i"), ("▁", "hi")]
_TOKENS = ["<unk>", "<s>", "</s>"] + _CHARS + [a + b for a, b in _MERGES]
ID = {token: i for i, token in enumerate(_TOKENS)}


def write_test_tokenizer(folder: Path) -> Path:
    from transformers import LlamaTokenizerFast

    backend = Tokenizer(models.BPE(vocab=dict(ID), merges=_MERGES, unk_token="<unk>", fuse_unk=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    backend.decoder = decoders.Metaspace()
    # add_bos_token on: a wrapper that used the tokenizer's own __call__ would get a BOS and fail.
    wrapped = LlamaTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                 eos_token="</s>", add_bos_token=True)
    wrapped.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return write_test_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def tok(tok_dir):
    return TextTokenizer.from_dir(tok_dir)


def test_the_backend_really_merges_words(tok):
    # Guards the fixture: without multi-character tokens the split tests below would prove nothing.
    assert tok._backend.tokenize("你好世界") == ["▁你好", "世界"]


def test_multichar_chinese_tokens_are_split(tok):
    assert tok.tokenize("你好世界") == ["你", "好", "世", "界"]
    assert tok.encode("你好世界") == [ID["你"], ID["好"], ID["世"], ID["界"]]


def test_only_words_in_the_vocabulary_as_such_are_split(tok):
    # "▁再见" has no bare "再见" in the vocabulary; "㐀㐁" is CJK extension A, outside the range.
    assert tok.tokenize("再见㐀㐁") == ["▁再见", "㐀㐁"]
    assert tok.encode("再见㐀㐁") == [ID["▁再见"], ID["㐀㐁"]]


def test_non_chinese_tokens_are_kept(tok):
    assert tok.encode("hi 你好") == [ID["▁hi"], ID["你"], ID["好"]]


def test_no_bos_or_eos(tok):
    ids = tok.encode("你好")
    assert ID["<s>"] not in ids and ID["</s>"] not in ids
    assert tok._backend("你好").input_ids[0] == ID["<s>"]  # the backend alone would add one


def test_missing_tokenizer_names_the_files(tmp_path):
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        TextTokenizer.from_dir(tmp_path)


def test_rejects_non_text(tok):
    with pytest.raises(TypeError):
        tok.encode(b"hi")


def _official_wrapper():
    """The reference package's wrapper, loaded by file: its package __init__ needs torchaudio."""
    spec = importlib.util.find_spec("voxcpm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the official voxcpm package is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "model" / "utils.py"
    module_spec = importlib.util.spec_from_file_location("_voxcpm_utils_ref", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.mask_multichar_chinese_tokens


@pytest.mark.parametrize("text", ["你好世界", "再见㐀㐁", "hi 你好，世界", "  你好 hi世界", "", "你"])
def test_matches_the_official_wrapper(tok, tok_dir, text):
    from transformers import LlamaTokenizerFast

    official = _official_wrapper()(LlamaTokenizerFast.from_pretrained(str(tok_dir)))
    assert tok.encode(text) == official(text)


@pytest.mark.parametrize("raw, expected", [
    ("a\nb", "a b"),
    ("a \n\n\t b", "a b"),
    ("  lead and trail  ", " lead and trail "),  # the official wrapper does not strip
    ("你好\u3000世界", "你好 世界"),  # Unicode whitespace counts, as in Python's \s
    ("plain", "plain"),
])
def test_normalize_text(raw, expected):
    assert normalize_text(raw) == expected


def _through_the_wrapper(backend, cjk_words, text):
    """The ids by transformers' own tokenize and convert_tokens_to_ids (the official wrapper's
    path), with the split of known Chinese words: what encode must give without that path's cost."""
    pieces = []
    for token in backend.tokenize(text):
        bare = token.replace("\u2581", "")
        pieces.extend(bare) if bare in cjk_words else pieces.append(token)
    return list(backend.convert_tokens_to_ids(pieces))


def _varied_texts():
    import random

    rng = random.Random(7)
    alphabet = ("abcdefghijklmnopqrstuvwxyz ABC,.!?'\"-\n\t  你好世界我们今天天气语音合成测试中国大家谢欢迎早上"
                "，。！éü€😀\u3000\u200b<>|_0123456789")
    texts = ["Hello world, this is a test of the voice.", "你好世界，我们今天测试语音合成。", "欢迎 欢迎",
             "<|audio_start|>hi<|audio_end|>", "<s> and </s>", "<unk>", "😀 emoji € and ü", "\x00\x01",
             " leading", "trailing ", "  ", "", "早上好早上好", "语音合成语音"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(300)]
    return texts


def test_encode_gives_the_wrappers_ids_for_varied_text(tmp_path):
    # The tiny checkpoint's tokenizer: byte fallback, special tokens, multi-character Chinese words.
    from inference.model.tiny_tokenizer import write_tokenizer

    write_tokenizer(tmp_path)
    tok = TextTokenizer.from_dir(tmp_path)
    backend = tok._backend
    # the official rule: a token of two or more characters, all in U+4E00-U+9FFF
    cjk_words = {t for t in backend.get_vocab() if len(t) >= 2 and all("\u4e00" <= ch <= "\u9fff" for ch in t)}
    assert cjk_words  # the tiny vocabulary has Chinese words, so the split is exercised
    for text in _varied_texts():
        assert tok.encode(text) == _through_the_wrapper(backend, cjk_words, text), repr(text)


def test_encode_leaves_the_wrapped_tokenizer_as_it_was(tok):
    # encode reads its own copy of the Rust tokenizer: the wrapper's settings stay the wrapper's
    before = tok._backend.backend_tokenizer.to_str()
    tok.encode("hi 你好")
    assert tok._backend.backend_tokenizer.to_str() == before
