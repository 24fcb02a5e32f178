"""A small scikit-learn model for ``examples/matrix.toml``, as a ``module:factory`` source (the Keras and Paddle
models come from ``convert_tensorflow.py`` and ``convert_paddle.py``: each matrix cell runs in a process of its own,
so TensorFlow and Paddle never load into the same one). The factory imports its framework inside the function."""
from __future__ import annotations


def sklearn_regressor():
    """A fitted StandardScaler + Ridge pipeline on 6 float features, and 200 sample rows."""
    import numpy as np
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 6)).astype(np.float32)
    y = x @ np.arange(1, 7, dtype=np.float32) + 0.1 * rng.standard_normal(200).astype(np.float32)
    return make_pipeline(StandardScaler(), Ridge(alpha=1.0)).fit(x, y), x
