"""Which kernels each module registers: since versions per domain and op (generated: do not edit).

Regenerate with ``python scripts/index_kernels.py onnxplug_cpu.kernels``; the plugin's tests check it.
"""

INDEX = {
    "activation": {
        "": {
            "Celu": (12, 28),
            "Elu": (1, 6, 22),
            "Gelu": (20,),
            "HardSigmoid": (1, 6, 22),
            "HardSwish": (14, 22),
            "Hardmax": (1, 11, 13),
            "LeakyRelu": (1, 6, 16),
            "LogSoftmax": (1, 11, 13),
            "Mish": (18, 22),
            "PRelu": (1, 6, 7, 9, 16),
            "Relu": (1, 6, 13, 14),
            "Selu": (1, 6, 22),
            "Shrink": (9,),
            "Sigmoid": (1, 6, 13),
            "Softmax": (1, 11, 13),
            "Softplus": (1, 22),
            "Softsign": (1, 22),
            "SwiGLU": (28,),
            "Swish": (24,),
            "Tanh": (1, 6, 13),
            "ThresholdedRelu": (10, 22),
        },
    },
    "attention": {
        "": {
            "Attention": (23, 24, 25),
            "RotaryEmbedding": (23,),
        },
        "ai.onnx.preview": {
            "FlexAttention": (1,),
        },
    },
    "attention_linear": {
        "": {
            "CausalConvWithState": (27,),
            "LinearAttention": (27,),
        },
    },
    "bitwise": {
        "": {
            "BitShift": (11, 28),
            "BitwiseAnd": (18,),
            "BitwiseNot": (18,),
            "BitwiseOr": (18,),
            "BitwiseXor": (18,),
        },
    },
    "cast": {
        "": {
            "BitCast": (26,),
            "Cast": (1, 6, 9, 13, 19, 21, 23, 24, 25, 28),
            "CastLike": (15, 19, 21, 23, 24, 25),
        },
    },
    "construct": {
        "": {
            "CenterCropPad": (18,),
            "Constant": (1, 9, 11, 12, 13, 19, 21, 23, 24, 25),
            "ConstantOfShape": (9, 20, 21, 23, 24, 25),
            "Expand": (8, 13),
            "EyeLike": (9, 22),
            "Pad": (1, 2, 11, 13, 18, 19, 21, 23, 24, 25),
            "Range": (11, 27),
            "Tile": (1, 6, 13),
            "Trilu": (14,),
        },
    },
    "control_flow": {
        "": {
            "If": (1, 11, 13, 16, 19, 21, 23, 24, 25),
            "Loop": (1, 11, 13, 16, 19, 21, 23, 24, 25),
            "Scan": (8, 9, 11, 16, 19, 21, 23, 24, 25),
        },
    },
    "elementwise": {
        "": {
            "Add": (1, 6, 7, 13, 14),
            "Div": (1, 6, 7, 13, 14),
            "Max": (1, 6, 8, 12, 13),
            "Mean": (1, 6, 8, 13),
            "Min": (1, 6, 8, 12, 13),
            "Mod": (10, 13, 28),
            "Mul": (1, 6, 7, 13, 14),
            "Pow": (1, 7, 12, 13, 15),
            "Sub": (1, 6, 7, 13, 14),
            "Sum": (1, 6, 8, 13),
            "Where": (9, 16),
        },
    },
    "image": {
        "": {
            "AffineGrid": (20,),
            "GridSample": (16, 20, 22),
            "NonMaxSuppression": (10, 11),
            "RoiAlign": (10, 16, 22),
        },
    },
    "image_decode": {
        "": {
            "ImageDecoder": (20,),
        },
    },
    "indexing": {
        "": {
            "Compress": (9, 11, 28),
            "Gather": (1, 11, 13),
            "GatherElements": (11, 13),
            "GatherND": (11, 12, 13),
            "NonZero": (9, 13),
            "OneHot": (9, 11, 28),
            "ReverseSequence": (10, 28),
            "Slice": (1, 10, 11, 13),
        },
    },
    "logical": {
        "": {
            "And": (1, 7),
            "Equal": (1, 7, 11, 13, 19),
            "Greater": (1, 7, 9, 13),
            "GreaterOrEqual": (12, 16),
            "Less": (1, 7, 9, 13),
            "LessOrEqual": (12, 16),
            "Not": (1,),
            "Or": (1, 7),
            "Xor": (1, 7),
        },
    },
    "math": {
        "": {
            "CumProd": (26,),
            "CumSum": (11, 14),
            "Det": (11, 22),
            "Einsum": (12, 28),
            "Gemm": (1, 6, 7, 9, 11, 13),
            "MatMul": (1, 9, 13),
        },
    },
    "ml": {
        "ai.onnx.ml": {
            "ArrayFeatureExtractor": (1,),
            "Binarizer": (1,),
            "CastMap": (1,),
            "CategoryMapper": (1,),
            "DictVectorizer": (1,),
            "FeatureVectorizer": (1,),
            "Imputer": (1,),
            "LabelEncoder": (1, 2, 4),
            "Normalizer": (1,),
            "OneHotEncoder": (1,),
            "Scaler": (1,),
            "ZipMap": (1,),
        },
    },
    "ml_linear": {
        "ai.onnx.ml": {
            "LinearClassifier": (1,),
            "LinearRegressor": (1,),
            "SVMClassifier": (1,),
            "SVMRegressor": (1,),
        },
    },
    "ml_trees": {
        "ai.onnx.ml": {
            "TreeEnsemble": (5,),
            "TreeEnsembleClassifier": (1, 3, 5),
            "TreeEnsembleRegressor": (1, 3, 5),
        },
    },
    "nn": {
        "": {
            "Col2Im": (18,),
            "Conv": (1, 11, 22),
            "ConvTranspose": (1, 11, 22),
            "DeformConv": (19, 22),
            "Dropout": (1, 6, 7, 10, 12, 13, 22),
        },
    },
    "normalization": {
        "": {
            "BatchNormalization": (1, 6, 7, 9, 14, 15),
            "GroupNormalization": (18, 21),
            "InstanceNormalization": (1, 6, 22),
            "LRN": (1, 13),
            "LayerNormalization": (17,),
            "LpNormalization": (1, 22),
            "MeanVarianceNormalization": (9, 13),
            "RMSNormalization": (23,),
        },
    },
    "optional": {
        "": {
            "Optional": (15, 28),
            "OptionalGetElement": (15, 18, 28),
            "OptionalHasElement": (15, 18, 28),
        },
    },
    "pool": {
        "": {
            "AveragePool": (1, 7, 10, 11, 19, 22),
            "GlobalAveragePool": (1, 22),
            "GlobalLpPool": (1, 2, 22),
            "GlobalMaxPool": (1, 22),
            "LpPool": (1, 2, 11, 18, 22),
            "MaxPool": (1, 8, 10, 11, 12, 22),
            "MaxRoiPool": (1, 22),
            "MaxUnpool": (9, 11, 22),
        },
    },
    "quantization": {
        "": {
            "DequantizeLinear": (10, 13, 19, 21, 23, 24, 25, 28),
            "DynamicQuantizeLinear": (11,),
            "QuantizeLinear": (10, 13, 19, 21, 23, 24, 25, 28),
        },
    },
    "quantized_products": {
        "": {
            "ConvInteger": (10,),
            "MatMulInteger": (10,),
            "QLinearConv": (10,),
            "QLinearMatMul": (10, 21),
        },
    },
    "random": {
        "": {
            "Bernoulli": (15, 22),
            "Multinomial": (7, 22),
            "RandomNormal": (1, 22),
            "RandomNormalLike": (1, 22),
            "RandomUniform": (1, 22),
            "RandomUniformLike": (1, 22),
        },
    },
    "reduce": {
        "": {
            "ArgMax": (1, 11, 12, 13),
            "ArgMin": (1, 11, 12, 13),
            "ReduceL1": (1, 11, 13, 18),
            "ReduceL2": (1, 11, 13, 18),
            "ReduceLogSum": (1, 11, 13, 18, 28),
            "ReduceLogSumExp": (1, 11, 13, 18, 28),
            "ReduceMax": (1, 11, 12, 13, 18, 20),
            "ReduceMean": (1, 11, 13, 18),
            "ReduceMin": (1, 11, 12, 13, 18, 20),
            "ReduceProd": (1, 11, 13, 18),
            "ReduceSum": (1, 11, 13),
            "ReduceSumSquare": (1, 11, 13, 18),
        },
    },
    "resize": {
        "": {
            "Resize": (10, 11, 13, 18, 19),
            "Upsample": (1, 7, 9, 10),
        },
    },
    "rnn": {
        "": {
            "GRU": (1, 3, 7, 14, 22),
            "LSTM": (1, 7, 14, 22),
            "RNN": (1, 7, 14, 22),
        },
    },
    "scatter": {
        "": {
            "Scatter": (9, 11),
            "ScatterElements": (11, 13, 16, 18),
            "ScatterND": (11, 13, 16, 18),
            "TensorScatter": (24,),
        },
    },
    "sequence": {
        "": {
            "ConcatFromSequence": (11,),
            "SequenceAt": (11,),
            "SequenceConstruct": (11,),
            "SequenceEmpty": (11,),
            "SequenceErase": (11,),
            "SequenceInsert": (11,),
            "SequenceLength": (11,),
            "SequenceMap": (17,),
            "SplitToSequence": (11, 24),
        },
    },
    "shape": {
        "": {
            "Concat": (1, 4, 11, 13),
            "DepthToSpace": (1, 11, 13, 28),
            "Flatten": (1, 9, 11, 13, 21, 23, 24, 25),
            "Identity": (1, 13, 14, 16, 19, 21, 23, 24, 25),
            "Reshape": (1, 5, 13, 14, 19, 21, 23, 24, 25),
            "Shape": (1, 13, 15, 19, 21, 23, 24, 25),
            "Size": (1, 13, 19, 21, 23, 24, 25),
            "SpaceToDepth": (1, 13, 28),
            "Split": (1, 2, 11, 13, 18),
            "Squeeze": (1, 11, 13, 21, 23, 24, 25),
            "Transpose": (1, 13, 21, 23, 24, 25),
            "Unsqueeze": (1, 11, 13, 21, 23, 24, 25),
        },
    },
    "signal": {
        "": {
            "BlackmanWindow": (17,),
            "DFT": (17, 20),
            "HammingWindow": (17,),
            "HannWindow": (17,),
            "MelWeightMatrix": (17,),
            "STFT": (17,),
        },
    },
    "sorting": {
        "": {
            "TopK": (1, 10, 11, 24),
            "Unique": (11, 28),
        },
    },
    "text": {
        "": {
            "RegexFullMatch": (20,),
            "StringConcat": (20,),
            "StringNormalizer": (10,),
            "StringSplit": (20,),
            "TfIdfVectorizer": (9,),
        },
    },
    "training": {
        "ai.onnx.preview.training": {
            "Adagrad": (1,),
            "Adam": (1,),
            "Momentum": (1,),
        },
    },
    "unary": {
        "": {
            "Abs": (1, 6, 13),
            "Acos": (7, 22),
            "Acosh": (9, 22),
            "Asin": (7, 22),
            "Asinh": (9, 22),
            "Atan": (7, 22),
            "Atanh": (9, 22),
            "Ceil": (1, 6, 13),
            "Clip": (1, 6, 11, 12, 13),
            "Cos": (7, 22),
            "Cosh": (9, 22),
            "Erf": (9, 13),
            "Exp": (1, 6, 13),
            "Floor": (1, 6, 13),
            "IsInf": (10, 20),
            "IsNaN": (9, 13, 20),
            "Log": (1, 6, 13),
            "Neg": (1, 6, 13),
            "Reciprocal": (1, 6, 13),
            "Round": (11, 22),
            "Sign": (9, 13),
            "Sin": (7, 22),
            "Sinh": (9, 22),
            "Sqrt": (1, 6, 13),
            "Tan": (7, 22),
        },
    },
}
