"""Which kernels each module registers: since versions per domain and op (generated: do not edit).

Regenerate with ``python scripts/index_kernels.py onnxplug_ms_ops.kernels``; the plugin's tests check it.
"""

INDEX = {
    "elementwise": {
        "com.microsoft": {
            "BiasAdd": (1,),
            "BiasGelu": (1,),
            "FastGelu": (1,),
            "Gelu": (1,),
            "QuickGelu": (1,),
            "Trilu": (1,),
        },
    },
    "attention": {
        "com.microsoft": {
            "Attention": (1,),
            "MultiHeadAttention": (1,),
        },
    },
    "fused": {
        "com.microsoft": {
            "FusedConv": (1,),
            "FusedGemm": (1,),
            "FusedMatMul": (1,),
        },
    },
    "gqa": {
        "com.microsoft": {
            "GroupQueryAttention": (1,),
            "RotaryEmbedding": (1,),
        },
    },
    "normalization": {
        "": {
            "LayerNormalization": (1,),
            "SimplifiedLayerNormalization": (1,),
        },
        "com.microsoft": {
            "EmbedLayerNormalization": (1,),
            "SkipLayerNormalization": (1,),
            "SkipSimplifiedLayerNormalization": (1,),
        },
    },
    "quantized": {
        "com.microsoft": {
            "DynamicQuantizeMatMul": (1,),
            "MatMulIntegerToFloat": (1,),
            "MatMulNBits": (1,),
        },
    },
    "qlinear": {
        "com.microsoft": {
            "NhwcMaxPool": (1,),
            "QLinearAdd": (1,),
            "QLinearConcat": (1,),
            "QLinearGlobalAveragePool": (1,),
            "QLinearLeakyRelu": (1,),
            "QLinearMul": (1,),
            "QLinearSigmoid": (1,),
        },
    },
    "qpool": {
        "com.microsoft": {
            "QLinearAveragePool": (1,),
            "QLinearReduceMean": (1,),
            "QLinearSoftmax": (1,),
        },
    },
    "qlinalg": {
        "com.microsoft": {
            "DequantizeLinear": (1,),
            "QGemm": (1,),
            "QLinearWhere": (1,),
            "QuantizeLinear": (1,),
        },
    },
    "qtransformer": {
        "com.microsoft": {
            "QAttention": (1,),
            "QEmbedLayerNormalization": (1,),
        },
    },
    "qlstm": {
        "com.microsoft": {
            "DynamicQuantizeLSTM": (1,),
        },
    },
    "qconv": {
        "com.microsoft": {
            "QLinearConv": (1,),
        },
    },
    "qgather": {
        "com.microsoft": {
            "GatherBlockQuantized": (1,),
            "TransposeMatMul": (1,),
        },
    },
    "bnb4": {
        "com.microsoft": {
            "MatMulBnb4": (1,),
        },
    },
    "ml": {
        "com.microsoft": {
            "CDist": (1,),
            "MurmurHash3": (1,),
            "Tokenizer": (1,),
        },
    },
}
