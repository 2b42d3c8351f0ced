"""Tokenizer, CDist and MurmurHash3 against onnxruntime, one node at a time and in the models
skl2onnx converts (text vectorizers, nearest neighbours, feature hashing)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import onnxplug

S = onnx.TensorProto.STRING


def _string_model(op, output_type=S, **attrs):
    node = oh.make_node(op, ["x"], ["y"], domain="com.microsoft", **attrs)
    graph = oh.make_graph(
        [node], "t", [oh.make_tensor_value_info("x", S, None)], [oh.make_tensor_value_info("y", output_type, None)]
    )
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    return oh.make_model(graph, opset_imports=opsets, ir_version=9).SerializeToString()


def _both(ort, model, x):
    ours = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return ours, theirs


_TEXT = ["Hello World", "I love computer science !", "a,,b  c", "", "日本 語 x"]


@pytest.mark.parametrize(
    "attrs",
    [
        {"separators": [" "]},
        {"separators": [" ", ","], "mark": 1},
        {"separators": [" "], "mincharnum": 2},
        {"separators": [" ", "b c"]},  # applied in list order
        {"separators": ["o W", "l+"]},
        {"separators": ["a|ab"]},  # leftmost-longest
        {"separators": [""]},  # character mode
        {"tokenexp": "[a-zA-Z]+"},
        {"tokenexp": "[a-z]+", "mincharnum": 3, "mark": 1},
        {"tokenexp": "x|xa|[ab]+|e"},
        {"tokenexp": ".", "mark": 1},
        {"tokenexp": "[0-9]+", "mark": 1},  # no tokens anywhere: shape (C, 0)
    ],
)
@pytest.mark.parametrize("two_d", [False, True])
def test_tokenizer(ort, attrs, two_d):
    attrs = {"mark": 0, "mincharnum": 1, "pad_value": "#", **attrs}
    x = np.array(_TEXT + ["xaby"], dtype=object)
    x = x.reshape(2, 3) if two_d else x
    ours, theirs = _both(ort, _string_model("Tokenizer", **attrs), x)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype == object
    assert ours.tolist() == theirs.tolist()


@pytest.mark.parametrize("shape", [(0,), (2, 0)])
def test_tokenizer_empty_input(ort, shape):
    x = np.zeros(shape, dtype=object)
    ours, theirs = _both(ort, _string_model("Tokenizer", mark=0, mincharnum=1, pad_value="#", separators=[" "]), x)
    assert ours.shape == theirs.shape == shape


@pytest.mark.parametrize(
    "attrs,message",
    [
        ({"separators": [" "], "mincharnum": 0}, "mincharnum must be positive"),
        ({}, "exactly one of the separators and tokenexp"),
        ({"separators": [""], "mincharnum": 2}, "too big for character tokenization"),
        ({"tokenexp": "[a-"}, "not a valid regular expression"),
    ],
)
def test_tokenizer_bad_attributes(attrs, message):
    attrs = {"mark": 0, "mincharnum": 1, "pad_value": "#", **attrs}
    session = onnxplug.InferenceSession(_string_model("Tokenizer", **attrs), providers=["CPUExecutionProvider"])
    with pytest.raises(onnxplug.InvalidArgument, match=message):
        session.run(None, {"x": np.array(["a b"], dtype=object)})


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cdist(run_both, close, rng, metric, dtype):
    a = rng.standard_normal((7, 5)).astype(dtype)
    b = np.concatenate([rng.standard_normal((3, 5)), a[:2].astype(np.float64)]).astype(dtype)  # zero distances
    close(*run_both("CDist", [("a", a), ("b", b)], ["c"], metric=metric), rtol=1e-5, atol=1e-5)


def test_cdist_other_metric_is_not_implemented(run_ours, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(onnxplug.NotImplemented, match="metric 'cityblock'"):
        run_ours("CDist", [("a", a), ("b", a)], ["c"], metric="cityblock")


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64])
@pytest.mark.parametrize("positive,seed", [(1, 0), (0, 42), (1, 2**32 - 1)])
def test_murmur_hash3_numbers(run_both, close, rng, dtype, positive, seed):
    x = (rng.standard_normal((3, 5)) * 1e6).astype(dtype)
    close(*run_both("MurmurHash3", [("x", x)], ["y"], positive=positive, seed=seed))


@pytest.mark.parametrize("positive", [0, 1])
def test_murmur_hash3_strings(ort, positive):
    words = ["", "a", "ab", "abc", "abcd", "abcde", "hello world", "日本語", "ünïcødé strings of length 22"]
    x = np.array(words, dtype=object).reshape(3, 3)
    model = _string_model("MurmurHash3", onnx.TensorProto.UINT32 if positive else onnx.TensorProto.INT32, seed=7)
    model = model if positive else _string_model("MurmurHash3", onnx.TensorProto.INT32, seed=7, positive=0)
    ours, theirs = _both(ort, model, x)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


def _c_locale(onx):
    """onnxruntime's StringNormalizer defaults to the en_US.UTF-8 locale, which minimal systems
    lack; skl2onnx sets none, so name one every system has."""
    for node in onx.graph.node:
        if node.op_type == "StringNormalizer" and not any(a.name == "locale" for a in node.attribute):
            node.attribute.append(oh.make_attribute("locale", "C.UTF-8"))
    return onx


def _sklearn_compare(ort, onx, feeds, contrib_op):
    assert any(n.domain == "com.microsoft" and n.op_type == contrib_op for n in onx.graph.node), [
        (n.domain, n.op_type) for n in onx.graph.node
    ]
    model = onx.SerializeToString()
    ours = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, want in zip(ours, theirs):
        if isinstance(want, list):  # a sequence of maps (ZipMap)
            assert got == want
            continue
        assert got.shape == want.shape and got.dtype == want.dtype
        if want.dtype.kind in "iub":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sklearn_tfidf_vectorizer(ort):
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.feature_extraction.text import TfidfVectorizer

    corpus = ["The quick brown fox.", "Jumps over the lazy dog!", "the fox, the dog", "Quick quick"]
    vectorizer = TfidfVectorizer(ngram_range=(1, 2)).fit(corpus)
    onx = skl2onnx.convert_sklearn(
        vectorizer,
        initial_types=[("text", skl2onnx.common.data_types.StringTensorType([None]))],
        options={TfidfVectorizer: {"tokenexp": r"\b\w\w+\b"}},
    )
    _sklearn_compare(ort, _c_locale(onx), {"text": np.array(corpus + ["an unseen fox"], dtype=object)}, "Tokenizer")


def test_sklearn_count_vectorizer_with_separators(ort):
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.feature_extraction.text import CountVectorizer

    corpus = ["red green blue", "green, green; blue", "blue (red)"]
    vectorizer = CountVectorizer().fit(corpus)
    separators = [" ", ".", ",", ";", ":", "!", r"\(", r"\)", "\n", '"', "'", "-", r"\[", r"\]", "@"]
    onx = skl2onnx.convert_sklearn(
        vectorizer,
        initial_types=[("text", skl2onnx.common.data_types.StringTensorType([None]))],
        options={CountVectorizer: {"separators": separators}},
    )
    _sklearn_compare(ort, _c_locale(onx), {"text": np.array(corpus, dtype=object)}, "Tokenizer")


def test_sklearn_nearest_neighbors_with_cdist(ort, rng):
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.neighbors import KNeighborsRegressor

    x = rng.standard_normal((30, 4)).astype(np.float32)
    model = KNeighborsRegressor(n_neighbors=3).fit(x, x.sum(axis=1))
    onx = skl2onnx.convert_sklearn(
        model,
        initial_types=[("x", skl2onnx.common.data_types.FloatTensorType([None, 4]))],
        options={id(model): {"optim": "cdist"}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    _sklearn_compare(ort, onx, {"x": rng.standard_normal((6, 4)).astype(np.float32)}, "CDist")


def test_sklearn_feature_hasher(ort):
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.feature_extraction import FeatureHasher

    hasher = FeatureHasher(n_features=16, input_type="string")
    words = np.array([["cat", "dog", "fish"], ["bird", "cat", "ünïcødé"]], dtype=object)
    hasher.fit(words)
    onx = skl2onnx.convert_sklearn(
        hasher, initial_types=[("words", skl2onnx.common.data_types.StringTensorType([None, 3]))]
    )
    _sklearn_compare(ort, onx, {"words": words}, "MurmurHash3")
