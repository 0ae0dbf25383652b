"""kvcheck.ReferenceModel: the double-precision reference transformer (reference/model.h)."""

import os


class ReferenceModel:
    """A model directory (config.json + safetensors, tokenizer.json or tokenizer.model) or a GGUF file.

    tokenize(text) gives ids (BOS as the model's tokenizer adds it); logits(ids) the teacher-forced
    logits [len(ids), vocab] in float32, computed in double: row i predicts the token after ids[i].
    """

    def __init__(self, path, threads=0):
        try:
            from ._reference import ReferenceModel as _Model
        except ImportError as e:  # built with -DKVCHECK_PYTHON_MODEL=OFF
            raise ImportError("kvcheck was built without the reference model (KVCHECK_PYTHON_MODEL=OFF); "
                              "reinstall with pip install ./python") from e
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"kvcheck.ReferenceModel: path must be a str or os.PathLike, got {type(path).__name__}")
        self._m = _Model.load(os.fspath(path), threads)

    @property
    def vocab_size(self):
        return self._m.vocab_size

    def tokenize(self, text, add_bos=True):
        if not isinstance(text, str):
            raise TypeError(f"kvcheck.ReferenceModel.tokenize: text must be a str, got {type(text).__name__}")
        return self._m.tokenize(text, add_bos)

    def detokenize(self, ids):
        return self._m.detokenize(list(ids))

    def logits(self, ids):
        import numpy as np
        if isinstance(ids, (list, tuple)):
            ids = np.asarray(ids, dtype=np.int32)
        return self._m.logits(ids)
