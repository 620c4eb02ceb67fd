"""The WikiText pipeline (scan_snap/text.py, notes §2.5) on tiny texts written here."""

import math

import jax
import numpy as np
import pytest

from landscape.scan_snap import text

TINY = """
 = Valkyria Chronicles =

 Senjō no Valkyria 3 : Unrecorded Chronicles ( Japanese : 戦場のヴァルキュリア3 ) is a game .
 The game began development in 2010 , carrying over a large portion of the work ; it 's "new" .
"""


def test_tokenize_is_basic_english():
    assert text.tokenize('Hello, World! (It\'s) 3.5? a;b:c <br />"quoted"') == [
        "hello",
        ",",
        "world",
        "!",
        "(",
        "it",
        "'",
        "s",
        ")",
        "3",
        ".",
        "5",
        "?",
        "a",
        "b",
        "c",
        "quoted",
    ]
    assert text.tokenize("  = = Plot = =  ") == ["=", "=", "plot", "=", "="]
    assert text.tokenize(" <unk> 0 @.@ 7 @-@ ") == ["<unk>", "0", "@", ".", "@", "7", "@-@"]
    assert text.tokenize("") == []


def test_vocabulary_orders_types_by_count_after_unk():
    vocab = text.build_vocabulary(["b a b c", "c b <unk>", ""])
    assert vocab.types == ("<unk>", "b", "c", "a")  # b x3, c x2, a x1
    assert vocab.ids(["a", "b", "zebra", "<unk>"]) == [3, 1, 0, 0]
    assert len(vocab) == 4


def test_encode_concatenates_nonempty_lines_without_eos():
    vocab = text.build_vocabulary(["x y", "y"])
    stream = text.encode(["x y", "", "   ", "y z x"], vocab)
    assert stream.dtype == np.int32
    assert stream.tolist() == vocab.ids(["x", "y", "y", "z", "x"])


def test_batchify_cuts_contiguous_columns_and_drops_the_tail():
    stream = np.arange(23, dtype=np.int32)
    data = text.batchify(stream, 4)  # rows = 23 // 4 = 5
    assert data.shape == (5, 4)
    for b in range(4):
        assert data[:, b].tolist() == list(range(5 * b, 5 * b + 5))
    with pytest.raises(ValueError, match="no row pair"):
        text.batchify(np.arange(5, dtype=np.int32), 4)


def test_chunks_have_bptt_rows_and_targets_shifted_by_one():
    data = text.batchify(np.arange(200, dtype=np.int32), 5)  # (40, 5)
    assert text.num_chunks(40, 7) == 5  # (40 - 1) // 7: no short chunk
    take = jax.jit(lambda i: text.chunk(data, i, 7))
    for i in range(5):
        inputs, targets = take(i)
        assert inputs.shape == targets.shape == (7, 5)
        np.testing.assert_array_equal(inputs, data[7 * i : 7 * i + 7])
        np.testing.assert_array_equal(targets, data[7 * i + 1 : 7 * i + 8])
        np.testing.assert_array_equal(targets, inputs + 1)  # each column counts up


def _folder(tmp_path, names, lines=TINY):
    tmp_path.mkdir(exist_ok=True)
    for name in names:
        (tmp_path / name).write_text(lines, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    "layout",
    [
        ("train.txt", "valid.txt", "test.txt"),
        ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens"),
    ],
)
def test_load_reads_either_layout(tmp_path, layout):
    folder = _folder(tmp_path, layout)
    (folder / layout[2]).write_text("the game began in 2099 .\n", encoding="utf-8")
    corpus = text.load(
        folder, train_split="train", eval_split="test", batch_size=3, eval_batch_size=2
    )
    words = text.tokenize(TINY)
    assert corpus.train_tokens == len(words) and corpus.vocab_size == len(set(words)) + 1
    assert corpus.train.shape == (len(words) // 3, 3)
    assert corpus.eval.shape == (3, 2)  # 6 tokens in 2 columns
    vocab = corpus.vocabulary
    assert corpus.eval[:, 0].tolist() == vocab.ids(["the", "game", "began"])
    assert vocab.ids(["2099"]) == [0]  # unseen in train: <unk>
    assert corpus.unk_fraction("eval") == pytest.approx(1 / 6)


def test_load_says_what_is_missing_in_one_sentence(tmp_path):
    with pytest.raises(text.TextDataError, match=r"there is no folder '.*nowhere' \(relative to"):
        text.load(tmp_path / "nowhere")
    with pytest.raises(text.TextDataError, match=r"tokens for train, valid, test: WikiText-2 "):
        text.load(tmp_path / "nowhere")
    folder = _folder(tmp_path / "wt", ["valid.txt", "wiki.test.tokens"])
    with pytest.raises(
        text.TextDataError,
        match=r"has no train split \(train.txt or wiki.train.tokens\); it holds "
        r"valid \(valid.txt\), test \(wiki.test.tokens\): WikiText-2 .* is in the PyTorch "
        r"examples repository \(word_language_model/data/wikitext-2: .*set text.path to the "
        r"folder\.$",
    ):
        text.load(folder, train_split="train", eval_split="valid")
    assert set(text.splits_in(folder)) == {"valid", "test"}
    assert text.missing_splits_message(folder, ("valid", "test")) is None


def test_unigram_cross_entropy_is_the_context_free_loss(tmp_path):
    folder = _folder(tmp_path, ["train.txt"], "a a a b b c\n")
    (folder / "valid.txt").write_text("a b c d\n", encoding="utf-8")  # d: <unk>, unseen
    corpus = text.load(
        folder, train_split="train", eval_split="valid", batch_size=1, eval_batch_size=1
    )
    # train counts: a 3, b 2, c 1, <unk> 0 -> counted once: total 7
    expected = -(math.log(3 / 7) + math.log(2 / 7) + math.log(1 / 7) + math.log(1 / 7)) / 4
    assert text.unigram_cross_entropy(corpus) == pytest.approx(expected)
