"""The rule set the DLC backend applies to its prepared model, for onnxruntime's QNN execution provider, in the order
the rules apply. Rules in ``REFOLD`` leave constants that onnxruntime's folding takes further; the backend folds
again after them."""
from __future__ import annotations

from onnxbridge.backends.dlc.legalize.copies import CLIP, DROPOUT, GEMM, IDENTITY, ONE_INPUT, SHAPE, SIZE
from onnxbridge.backends.dlc.legalize.elementwise import (CELU, GELU, HARDSWISH, ISINF, ISNAN, MISH, SELU, SHRINK,
                                                          SOFTPLUS, SOFTSIGN, TRIG, XOR)
from onnxbridge.backends.dlc.legalize.indexing import (ARGMAX_LAST, ARGMIN_LAST, CUMSUM, GATHER_ELEMENTS, HARDMAX,
                                                       SCATTER_ELEMENTS, TRILU)
from onnxbridge.backends.dlc.legalize.normalization import BATCHNORM, LAYERNORM, RMS_SCALE, SUM_REDUCTION
from onnxbridge.backends.dlc.legalize.padding import END_PAD
from onnxbridge.backends.dlc.legalize.pooling import AVGPOOL, CONVTRANSPOSE, LPPOOL
from onnxbridge.legalize.rank import max_rank_rule

MAX_RANK = 5  # QNN's tensor rank limit
RANK6_TRANSPOSE = max_rank_rule(MAX_RANK)
# rules whose constants onnxruntime's folding takes further: the prepared model is folded again after them
REFOLD = frozenset({SHAPE.name, SIZE.name})
QNN_RULES = (SHAPE, SIZE, GELU, ISNAN, TRILU, CUMSUM, IDENTITY, LAYERNORM, BATCHNORM, DROPOUT, ONE_INPUT, CLIP, GEMM,
             SELU, CELU, SOFTSIGN, SOFTPLUS, MISH, SHRINK, HARDSWISH, TRIG, ARGMAX_LAST, ARGMIN_LAST, HARDMAX, XOR,
             ISINF, GATHER_ELEMENTS, SCATTER_ELEMENTS, LPPOOL, AVGPOOL, CONVTRANSPOSE, END_PAD, SUM_REDUCTION,
             RMS_SCALE, RANK6_TRANSPOSE)
