"""ai.onnx.ml feature transforms: ArrayFeatureExtractor, Binarizer, CastMap, CategoryMapper,
DictVectorizer, FeatureVectorizer, Imputer, LabelEncoder, Normalizer, OneHotEncoder, Scaler, ZipMap.

The models (linear, SVM, tree ensembles) live in ``ml_linear`` and ``ml_trees``.  Where the ONNX
text leaves a detail open (1-D inputs, output shapes of map ops), onnxruntime's behaviour is
followed because that is what converted models are tested against.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._post_transforms import row_reduce
from ._registry import kernel

ML = "ai.onnx.ml"


def _rows(x):
    """ML ops take [N, C]; a 1-D input is one row."""
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim != 2:
        raise InvalidArgument(f"expected a [N, C] input, got shape {x.shape}")
    return x


def _str_keys(values):
    """Strings as a fixed-width unicode array so that they can be sorted and searched."""
    flat = list(values)
    return np.array(flat, dtype=str) if flat else np.empty(0, dtype="<U1")


class _Lookup:
    """A vectorised dictionary: sorted keys searched with ``np.searchsorted``.

    Float keys match NaN to NaN, like onnxruntime's LabelEncoder.
    """

    def __init__(self, keys, values, default, out_dtype):
        keys = np.asarray(keys)
        if keys.dtype == object or keys.dtype.kind == "U":
            keys = _str_keys(keys)
        self.string_keys = keys.dtype.kind == "U"
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        values = _objects(values) if np.dtype(out_dtype).kind == "O" else np.asarray(values, dtype=out_dtype)
        if len(values) != len(keys):
            raise Fail(f"{len(keys)} keys but {len(values)} values")
        self.values = values[order]
        self.default = default
        self.out_dtype = out_dtype
        self.nan_value = None
        if keys.dtype.kind == "f" and np.isnan(keys).any():
            self.nan_value = self.values[np.isnan(self.keys)][0]

    def __call__(self, x):
        if self.string_keys:
            if x.dtype != object:
                raise InvalidArgument(f"expected a string input, got {x.dtype}")
            probe = _str_keys(x.reshape(-1)).reshape(x.shape) if x.size else np.empty(x.shape, "<U1")
        else:
            if x.dtype == object:
                raise InvalidArgument("expected a numeric input, got strings")
            probe = x.astype(self.keys.dtype) if self.keys.size else x
        out = np.empty(x.shape, dtype=self.out_dtype)
        out[...] = self.default
        if self.keys.size == 0 or x.size == 0:
            return out
        pos = np.minimum(np.searchsorted(self.keys, probe), self.keys.size - 1)
        found = self.keys[pos] == probe
        out[found] = self.values[pos[found]]
        if self.nan_value is not None:
            out[np.isnan(probe)] = self.nan_value
        return out


def _objects(values):
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array


@kernel("ArrayFeatureExtractor", since=(1,), domain=ML)
def array_feature_extractor(x, y):
    indices = y.reshape(-1).astype(np.int64)
    size = x.shape[-1] if x.ndim else 0
    bad = (indices < 0) | (indices >= size)
    if bad.any():
        raise InvalidArgument(f"index {int(indices[bad][0])} is out of range for a last dimension of {size}")
    if x.ndim == 1:
        return x[indices].reshape(1, -1)
    return x[..., indices]


@kernel("Binarizer", since=(1,), domain=ML)
def binarizer(x, *, threshold):
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        if nan.any():  # onnxruntime rejects NaN rather than guessing a class for it
            raise InvalidArgument(f"Binarizer input is NaN at flat index {int(np.argmax(nan.reshape(-1)))}")
    return np.where(x > threshold, 1, 0).astype(x.dtype)


@kernel("CastMap", since=(1,), domain=ML)
def cast_map(x, *, cast_to, map_form, max_map):
    """A map int64 -> (string | float) to a [1, N] tensor, keys ascending (DENSE) or each value
    at its key's position among ``max_map`` slots (SPARSE)."""
    if not isinstance(x, dict):
        raise InvalidArgument(f"CastMap expects a map, got {type(x).__name__}")
    dtype = {"TO_FLOAT": np.float32, "TO_STRING": object, "TO_INT64": np.int64}.get(cast_to)
    if dtype is None:
        raise Fail(f"unknown cast_to {cast_to!r}")
    keys = sorted(x)
    values = [x[k] for k in keys]
    if dtype is object:
        converted = [v if isinstance(v, str) else _float_text(v) for v in values]
    else:
        try:
            converted = [dtype(float(v)) if isinstance(v, str) else v for v in values]
        except ValueError as err:
            raise InvalidArgument(f"cannot cast map value: {err}") from None
    if map_form == "DENSE":
        out = np.empty(len(keys), dtype=dtype)
        out[:] = converted if dtype is object else np.asarray(converted, dtype=np.float64).astype(dtype)
    elif map_form == "SPARSE":
        if max_map <= 0:
            raise Fail(f"SPARSE CastMap needs max_map > 0, got {max_map}")
        key_array = np.asarray(keys, dtype=np.int64)
        if key_array.size and (key_array.min() < 0 or key_array.max() >= max_map):
            raise InvalidArgument(f"map key out of range [0, {max_map}): {keys}")
        out = np.full(max_map, "" if dtype is object else 0, dtype=dtype)
        if keys:
            out[key_array] = converted if dtype is object else np.asarray(converted, np.float64).astype(dtype)
    else:
        raise Fail(f"unknown map_form {map_form!r}")
    return out.reshape(1, -1)


def _float_text(value):
    return f"{float(value):f}"  # onnxruntime formats with std::to_string, i.e. "%f"


@kernel("CategoryMapper", since=(1,), domain=ML, factory=True)
def category_mapper(ctx, *, cats_int64s=None, cats_strings=None, default_int64, default_string):
    ints = tuple(cats_int64s or ())
    strings = tuple(cats_strings or ())
    if len(ints) != len(strings):
        raise Fail(f"cats_int64s ({len(ints)}) and cats_strings ({len(strings)}) differ in length")
    to_int = _Lookup(strings, ints, default_int64, np.int64)
    to_str = _Lookup(np.asarray(ints, np.int64), strings, default_string, object)

    def run(x):
        return to_int(x) if x.dtype == object else to_str(x)

    return run


def _map_value_dtype(values):
    """The tensor type of a map's values; Python floats are taken as float (map(*, float) is
    what converters emit), numpy scalars keep their own type."""
    sample = values[0]
    if isinstance(sample, str):
        return object
    if isinstance(sample, np.generic):
        return sample.dtype
    if isinstance(sample, (bool, int)):
        return np.int64
    return np.float32


@kernel("DictVectorizer", since=(1,), domain=ML)
def dict_vectorizer(x, *, int64_vocabulary=None, string_vocabulary=None):
    if not isinstance(x, dict):
        raise InvalidArgument(f"DictVectorizer expects a map, got {type(x).__name__}")
    vocabulary = tuple(string_vocabulary or int64_vocabulary or ())
    values = list(x.values())
    dtype = _map_value_dtype(values) if values else np.float32
    out = np.empty((1, len(vocabulary)), dtype=dtype)
    out[...] = "" if dtype is object else 0
    for j, key in enumerate(vocabulary):  # loops over the vocabulary, not over data elements
        if key in x:
            out[0, j] = x[key]
    return out


@kernel("FeatureVectorizer", since=(1,), domain=ML)
def feature_vectorizer(*inputs, inputdimensions=None):
    dims = tuple(inputdimensions or ())
    if len(dims) != len(inputs):
        raise Fail(f"{len(inputs)} inputs but inputdimensions has {len(dims)} entries")
    tables = [_rows(x) for x in inputs]
    batch = {t.shape[0] for t in tables}
    if len(batch) > 1:
        raise InvalidArgument(f"inputs have different batch sizes {sorted(batch)}")
    n = batch.pop() if batch else 1
    out = np.zeros((n, sum(dims)), np.float32)
    start = 0
    for table, width in zip(tables, dims):
        take = min(width, table.shape[1])
        out[:, start : start + take] = table[:, :take]
        start += width
    return out


@kernel("Imputer", since=(1,), domain=ML)
def imputer(x, *, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float, replaced_value_int64):
    if x.dtype.kind == "f":
        values, replaced = imputed_value_floats, replaced_value_float
    else:
        values, replaced = imputed_value_int64s, replaced_value_int64
    if not values:
        raise Fail(f"Imputer has no imputed values for a {x.dtype} input")
    table = _rows(x) if x.ndim == 1 else x
    fill = np.asarray(values, dtype=x.dtype)
    if fill.size not in (1, table.shape[-1]):
        raise InvalidArgument(f"{fill.size} imputed values for {table.shape[-1]} columns")
    mask = np.isnan(table) if (x.dtype.kind == "f" and np.isnan(replaced)) else table == replaced
    return np.where(mask, fill, table).reshape(x.shape)


@kernel("LabelEncoder", since=(1,), domain=ML, factory=True)
def label_encoder_1(ctx, *, classes_strings=None, default_int64, default_string):
    classes = tuple(classes_strings or ())
    to_int = _Lookup(classes, np.arange(len(classes), dtype=np.int64), default_int64, np.int64)

    def run(x):
        if x.dtype == object:
            return to_int(x)
        index = x.astype(np.int64)
        valid = (index >= 0) & (index < len(classes))
        out = np.full(x.shape, default_string, dtype=object)
        out[valid] = _objects(classes)[index[valid]] if classes else default_string
        return out

    return run


def _label_encoder(keys, values, default, out_dtype):
    if keys is None or values is None:
        raise Fail("LabelEncoder needs one keys_* and one values_* attribute")
    return _Lookup(keys, values, default, out_dtype)


@kernel("LabelEncoder", since=(2,), domain=ML, factory=True)
def label_encoder_2(
    ctx,
    *,
    default_float,
    default_int64,
    default_string,
    keys_floats=None,
    keys_int64s=None,
    keys_strings=None,
    values_floats=None,
    values_int64s=None,
    values_strings=None,
):
    keys = keys_strings or keys_int64s or keys_floats
    if values_strings is not None:
        return _label_encoder(keys, values_strings, default_string, object)
    if values_int64s is not None:
        return _label_encoder(keys, values_int64s, default_int64, np.int64)
    return _label_encoder(keys, values_floats, default_float, np.float32)


@kernel("LabelEncoder", since=(4,), domain=ML, factory=True)
def label_encoder_4(
    ctx,
    *,
    default_float,
    default_int64,
    default_string,
    default_tensor=None,
    keys_floats=None,
    keys_int64s=None,
    keys_strings=None,
    keys_tensor=None,
    values_floats=None,
    values_int64s=None,
    values_strings=None,
    values_tensor=None,
):
    keys = keys_tensor if keys_tensor is not None else (keys_strings or keys_int64s or keys_floats)
    if keys is not None and not isinstance(keys, np.ndarray):
        keys = np.asarray(keys, dtype=object if keys_strings else (np.int64 if keys_int64s else np.float32))
    if values_tensor is not None:
        dtype = values_tensor.dtype
        if default_tensor is not None:
            default = default_tensor.reshape(-1)[0]
        else:
            default = "_Unused" if dtype.kind == "O" else (-1 if dtype.kind in "iu" else -0.0)
        return _label_encoder(keys, values_tensor.reshape(-1), default, dtype)
    if values_strings is not None:
        return _label_encoder(keys, values_strings, default_string, object)
    if values_int64s is not None:
        return _label_encoder(keys, values_int64s, default_int64, np.int64)
    return _label_encoder(keys, values_floats, default_float, np.float32)


@kernel("Normalizer", since=(1,), domain=ML)
def normalizer(x, *, norm):
    table = np.asarray(_rows(x), np.float64 if x.dtype == np.float64 else np.float32)
    if table.shape[1] == 0:
        return table.astype(np.float32).reshape(x.shape)
    if norm == "MAX":
        scale = row_reduce(np.fmax, table)  # NaN entries do not win the max
    elif norm == "L1":
        scale = row_reduce(np.add, np.abs(table))
    elif norm == "L2":
        scale = np.sqrt(row_reduce(np.add, table * table))
    else:
        raise Fail(f"unknown norm {norm!r}")
    # A row whose norm is 0 is left as it is (all zeros) instead of dividing by zero.
    scale[scale == 0] = 1
    out = table / scale
    return out.astype(np.float32, copy=False).reshape(x.shape)


@kernel("OneHotEncoder", since=(1,), domain=ML, factory=True)
def one_hot_encoder(ctx, *, cats_int64s=None, cats_strings=None, zeros):
    cats = cats_strings if cats_strings is not None else cats_int64s
    if not cats:
        raise Fail("OneHotEncoder needs cats_int64s or cats_strings")
    lookup = _Lookup(cats, np.arange(len(cats), dtype=np.int64), -1, np.int64)

    def run(x):
        if (x.dtype == object) != (cats_strings is not None):
            raise InvalidArgument(f"a {x.dtype} input does not match the categories' type")
        index = lookup(x if x.dtype == object else x.astype(np.int64))
        if not zeros and (index < 0).any():
            raise InvalidArgument(f"unknown category {x.reshape(-1)[np.argmax(index.reshape(-1) < 0)]!r}")
        return (index[..., None] == np.arange(len(cats))).astype(np.float32)

    return run


@kernel("Scaler", since=(1,), domain=ML, factory=True)
def scaler(ctx, *, offset=None, scale=None):
    # The attribute arrays are made once: converting them on every call was most of a
    # single-row run.
    shift = np.asarray(offset if offset else (0.0,), np.float32)
    factor = np.asarray(scale if scale else (1.0,), np.float32)

    checked = set()  # input widths whose attribute sizes were checked

    def run(x):
        table = x if x.dtype == np.float32 else x.astype(np.float32)
        width = table.shape[-1] if table.ndim else 1
        if width not in checked:
            for name, values in (("offset", shift), ("scale", factor)):
                if values.size not in (1, width):
                    raise InvalidArgument(f"{name} has {values.size} values for {width} features")
            checked.add(width)
        out = table - shift
        out *= factor
        return out

    return run


@kernel("ZipMap", since=(1,), domain=ML, factory=True)
def zip_map(ctx, *, classlabels_int64s=None, classlabels_strings=None):
    labels = (
        list(classlabels_strings) if classlabels_strings is not None else [int(v) for v in classlabels_int64s or ()]
    )
    if not labels:
        raise Fail("ZipMap needs classlabels_int64s or classlabels_strings")

    def run(x):
        table = _rows(x)
        if table.shape[1] != len(labels):
            raise InvalidArgument(f"input has {table.shape[1]} columns for {len(labels)} labels")
        return [dict(zip(labels, row)) for row in table.astype(np.float64).tolist()]

    return run
