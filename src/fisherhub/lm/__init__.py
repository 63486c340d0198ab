"""Causal LMs on one side of the seam: the resolved head (``HeadModel``), the scored tokens of a batch as
``HeadBatch`` values (``capture``), the sketch spec of a model (``specs``) and model loading (``loading``)."""

from fisherhub.lm.capture import head_batches, sketch_batch
from fisherhub.lm.head import HeadModel
from fisherhub.lm.loading import load_model_and_tokenizer
from fisherhub.lm.specs import pilot_mean, spec_for_model

__all__ = ["HeadModel", "head_batches", "load_model_and_tokenizer", "pilot_mean", "sketch_batch", "spec_for_model"]
