"""The op table behind the adapters, the Core ML lowerings and the MIL host kernels: a key registered twice is refused
at import time naming both functions; lookup and names."""
from __future__ import annotations

import pytest

from onnxbridge.optable import OpTable


def relu(x):
    return x


def clip(x):
    return x


def test_register_under_several_names_and_look_up():
    table: OpTable[str] = OpTable("kernel")
    assert table.register("relu", "relu6")(relu) is relu
    table["clip"] = clip
    table.update(identity=clip)
    assert table["relu"] is relu and table["relu6"] is relu and table.get("clip") is clip
    assert "identity" in table and "gelu" not in table and table.get("gelu") is None
    assert table.names() == ["clip", "identity", "relu", "relu6"]
    with pytest.raises(KeyError):
        table["gelu"]


def test_duplicate_registration_names_both_places():
    table: OpTable[str] = OpTable("kernel")
    table.register("relu")(relu)
    with pytest.raises(ValueError) as err:
        table.register("relu")(clip)
    message = str(err.value)
    assert message.startswith("kernel 'relu' is registered twice")
    assert f"{__name__}.relu ({__file__}:{relu.__code__.co_firstlineno})" in message
    assert f"{__name__}.clip ({__file__}:{clip.__code__.co_firstlineno})" in message
    assert table["relu"] is relu  # the first registration stands
    with pytest.raises(ValueError, match="'relu' is registered twice"):
        table.update(relu=clip)
    with pytest.raises(ValueError, match="'relu' is registered twice"):
        table["relu"] = clip


def test_adapter_steps_are_keyed_by_op_and_version():
    from onnxbridge.adapters import registry

    registry.load_rules()
    assert ("Softmax", 13) in registry.UP.names() and ("Softmax", 13) in registry.DOWN.names()
    with pytest.raises(ValueError, match=r"up rewrite \('Softmax', 13\) is registered twice"):
        registry.up(["Softmax"], 13)(relu)


def test_coreml_tables_refuse_a_second_registration():
    from onnxbridge.backends.coreml import evaluate, lower

    assert "Relu" in lower.OPS and "Relu" in lower.OPS.names()
    assert "relu" in evaluate.KERNELS and evaluate.KERNELS.get("no_such_op") is None
    with pytest.raises(ValueError, match="Core ML lowering of ONNX op 'Relu' is registered twice"):
        lower.op("Relu")(relu)
    with pytest.raises(ValueError, match="host kernel of MIL op 'relu' is registered twice"):
        evaluate.kernel("relu")(relu)
