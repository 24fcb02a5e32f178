"""The rule sets per backend, in the order they apply (the rules themselves: ``onnxbridge.legalize.qnn`` for the QNN
execution provider, ``onnxbridge.legalize.rank`` for the rank limit). Rules in ``REFOLD`` leave constants that
onnxruntime's folding takes further; the DLC backend folds again after them."""
from __future__ import annotations

from onnxbridge.legalize.qnn.copies import CLIP, DROPOUT, GEMM, IDENTITY, ONE_INPUT, SHAPE, SIZE
from onnxbridge.legalize.qnn.elementwise import (CELU, GELU, HARDSWISH, ISINF, ISNAN, MISH, SELU, SHRINK, SOFTPLUS,
                                                 SOFTSIGN, TRIG, XOR)
from onnxbridge.legalize.qnn.indexing import (ARGMAX_LAST, ARGMIN_LAST, CUMSUM, GATHER_ELEMENTS, HARDMAX,
                                              SCATTER_ELEMENTS, TRILU)
from onnxbridge.legalize.qnn.normalization import BATCHNORM, LAYERNORM, SUM_REDUCTION
from onnxbridge.legalize.qnn.pooling import AVGPOOL, CONVTRANSPOSE, LPPOOL
from onnxbridge.legalize.rank import RANK6_TRANSPOSE

# rules whose constants onnxruntime's folding takes further: the prepared model is folded again after them
REFOLD = frozenset({SHAPE.name, SIZE.name})
# the rules the DLC backend applies to its prepared model, for onnxruntime's QNN execution provider
QNN_RULES = (SHAPE, SIZE, GELU, ISNAN, TRILU, CUMSUM, IDENTITY, LAYERNORM, BATCHNORM, DROPOUT, ONE_INPUT, CLIP, GEMM,
             SELU, CELU, SOFTSIGN, SOFTPLUS, MISH, SHRINK, HARDSWISH, TRIG, ARGMAX_LAST, ARGMIN_LAST, HARDMAX, XOR,
             ISINF, GATHER_ELEMENTS, SCATTER_ELEMENTS, LPPOOL, AVGPOOL, CONVTRANSPOSE, SUM_REDUCTION,
             RANK6_TRANSPOSE)
# the rules the Core ML backend applies before lowering
COREML_RULES = (RANK6_TRANSPOSE,)
