import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from gnn_treelstm.trees import vectors as V

GLOVE = "the 0.1 0.2 0.3\nCat 1.0 2.0 3.0\ncat -1 -2 -3\n. . . 5 5 5\ndog 0.5 0.5 0.5\n"


def write(path: Path, text: str, gz: bool = False) -> Path:
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_read_glove_plain_and_gzip(tmp_path, gz):
    p = write(tmp_path / ("v.txt.gz" if gz else "v.txt"), GLOVE, gz)
    words, vec = V.read_vectors(p)
    assert words == ["the", "Cat", "cat", ". . .", "dog"]
    assert vec.dtype == np.float32 and vec.shape == (5, 3)
    np.testing.assert_allclose(vec[1], [1, 2, 3])
    np.testing.assert_allclose(vec[3], [5, 5, 5])


def test_word2vec_header(tmp_path):
    p = write(tmp_path / "w2v.txt", "2 3\na 1 2 3\nb 4 5 6\n")
    words, vec = V.read_vectors(p, dim=3)
    assert words == ["a", "b"] and vec.shape == (2, 3)


def test_word2vec_header_promises_more(tmp_path):
    p = write(tmp_path / "w2v.txt", "3 3\na 1 2 3\nb 4 5 6\n")
    with pytest.raises(V.VectorsFormatError, match=r"w2v.txt:3: .*promises 3 vectors.*has 2"):
        V.read_vectors(p)


def test_truncated_last_line(tmp_path):
    p = write(tmp_path / "v.txt", "a 1 2 3\nb 4 5 6\nc 7 8")
    with pytest.raises(V.VectorsFormatError, match=r"v.txt:3: truncated line: 2 values.*dim"):
        V.read_vectors(p)


def test_inconsistent_dimension(tmp_path):
    p = write(tmp_path / "v.txt", "a 1 2 3\nb 4 5 6 7\n")
    with pytest.raises(V.VectorsFormatError, match=r"v.txt:2: inconsistent dimension: 4 values"):
        V.read_vectors(p)


def test_wrong_expected_dimension(tmp_path):
    p = write(tmp_path / "v.txt", "a 1 2 3\n")
    with pytest.raises(V.VectorsFormatError, match=r"v.txt:1: .*dimension 3 but 50 was expected"):
        V.read_vectors(p, dim=50)
    h = write(tmp_path / "h.txt", "1 3\na 1 2 3\n")
    with pytest.raises(V.VectorsFormatError, match=r"h.txt:1: .*header says dimension 3"):
        V.read_vectors(h, dim=300)


def test_non_numeric_value(tmp_path):
    p = write(tmp_path / "v.txt", "a 1 2 3\nb 4 x 6\n")
    with pytest.raises(V.VectorsFormatError, match=r"v.txt:2: value 'x' is not a number"):
        V.read_vectors(p)


def test_truncated_gzip(tmp_path):
    full = tmp_path / "full.txt.gz"
    write(full, "".join(f"w{i} {i} {i} {i}\n" for i in range(3000)), gz=True)
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(V.VectorsFormatError, match=r"cut.txt.gz: the gzip stream is truncated"):
        V.read_vectors(cut)


def test_empty_and_missing(tmp_path):
    with pytest.raises(V.VectorsFormatError, match="no vectors"):
        V.read_vectors(write(tmp_path / "e.txt", "\n"))
    with pytest.raises(FileNotFoundError):
        V.read_vectors(tmp_path / "nope.txt")


def test_unknown_word_rule(tmp_path):
    p = write(tmp_path / "v.txt", GLOVE)
    vocab = ["<unk>", "Cat", "DOG", "The", "zebra", "cat"]
    emb, stats = V.build_embedding_matrix(vocab, p, cache_dir=tmp_path / "c")
    words, vec = V.read_vectors(p)
    mean = vec.mean(axis=0)
    e = emb.numpy()
    assert emb.shape == (6, 3)
    np.testing.assert_allclose(e[0], mean, rtol=1e-6)  # <unk> = mean of all vectors
    np.testing.assert_allclose(e[1], [1, 2, 3])  # exact (cased) match wins
    np.testing.assert_allclose(e[2], [0.5, 0.5, 0.5])  # DOG -> dog
    np.testing.assert_allclose(e[3], [0.1, 0.2, 0.3])  # The -> the
    np.testing.assert_allclose(e[4], mean, rtol=1e-6)  # unknown -> UNK
    np.testing.assert_allclose(e[5], [-1, -2, -3])
    assert (stats.exact, stats.lower, stats.unk) == (2, 2, 1)
    assert stats.coverage == pytest.approx(4 / 5)
    assert stats.unk_examples == ["zebra"] and stats.dim == 3 and stats.vectors_in_file == 5


def test_vocab_must_start_with_unk(tmp_path):
    p = write(tmp_path / "v.txt", GLOVE)
    with pytest.raises(ValueError, match="<unk>"):
        V.build_embedding_matrix(["the"], p, cache_dir=tmp_path)


def test_cache_reused_and_invalidated(tmp_path, monkeypatch):
    p = write(tmp_path / "v.txt", GLOVE)
    cdir = tmp_path / "cache"
    w1, v1 = V.load_vectors(p, cache_dir=cdir)
    cache = V.cache_path_for(p, cdir)
    assert cache.exists() and not list(cdir.glob("*.tmp"))

    calls = []
    real = V.read_vectors
    monkeypatch.setattr(V, "read_vectors", lambda *a, **k: calls.append(1) or real(*a, **k))
    w2, v2 = V.load_vectors(p, cache_dir=cdir)
    assert calls == [] and w2 == w1
    np.testing.assert_array_equal(v1, v2)

    # source changes (size and mtime) -> parsed again and the cache rewritten
    write(p, GLOVE + "new 9 9 9\n")
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    w3, v3 = V.load_vectors(p, cache_dir=cdir)
    assert calls == [1] and w3[-1] == "new" and v3.shape == (6, 3)
    V.load_vectors(p, cache_dir=cdir)
    assert calls == [1]


def test_damaged_cache_is_rebuilt(tmp_path):
    p = write(tmp_path / "v.txt", GLOVE)
    V.load_vectors(p, cache_dir=tmp_path)
    V.cache_path_for(p, tmp_path).write_bytes(b"garbage")
    words, vec = V.load_vectors(p, cache_dir=tmp_path)
    assert len(words) == 5


def test_real_glove_50d(shared_data, tmp_path):
    path = shared_data / "glove" / "glove.6B.50d.filtered.txt.gz"
    emb, stats = V.build_embedding_matrix(["<unk>", "the", "The", "qqqzzzxx"], path,
                                          cache_dir=tmp_path)
    assert stats.vectors_in_file == 26192 and stats.dim == 50
    assert (stats.exact, stats.lower, stats.unk) == (1, 1, 1)
    np.testing.assert_allclose(emb[1, :2].numpy(), [0.418, 0.24968], rtol=1e-6)


def test_accepts_vocab_object(tmp_path):
    from gnn_treelstm.trees.vocab import Vocab

    p = write(tmp_path / "v.txt", GLOVE)
    emb, stats = V.build_embedding_matrix(Vocab(["cat", "THE"]), p, cache_dir=tmp_path)
    assert emb.shape == (3, 3) and (stats.exact, stats.lower) == (1, 1)
