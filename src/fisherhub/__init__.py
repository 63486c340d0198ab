"""fisherhub: head Fisher alignment at vocabulary scale (FisherSketch).

Stream a dataset once through a causal LM, keep a 16 KiB random-feature signature of its per-token head
gradients, and compare signatures: their cosine estimates the Fisher alignment of the tasks.

    import fisherhub as fh
    model, tokenizer = fh.load_model_and_tokenizer(None)    # None: the embedded SmolLM2; or any id / folder
    source = fh.sketch_texts(source_texts, model, tokenizer)              # a list of texts -> fh.Signature
    target = fh.sketch_texts(target_texts, model, tokenizer, source.spec) # the same spec: comparable
    r = fh.alignment(source, target)
    print(r.fisher, "+-", r.stderr)                          # also r.activation, r.error, r.coupling

Every name is in ``fisherhub.__all__``; ``help(fisherhub.NAME)`` documents it. Names are imported on first
use, so ``import fisherhub`` (and ``fisherhub --help``) does not load torch. The command line: ``fisherhub --help``.
"""

from fisherhub.core import lazy_attributes
from fisherhub.core.version import library_version

__version__ = library_version()

_EXPORTS = {
    **{
        name: f"fisherhub.core.{module}"
        for module, names in {
            "alignment": ("AlignmentMatrix", "AlignmentResult", "alignment", "alignment_matrix"),
            "batch": ("HeadBatch",),
            "signature": ("Signature",),
            "spec": ("ModelFingerprint", "SketchSpec"),
            "state": ("SketchState",),
            "errors": (
                "FisherHubError",
                "ImplausibleAlignmentWarning",
                "IncompatibleSignaturesError",
                "InputError",
                "SignatureFileError",
                "TooFewDocumentsError",
            ),
        }.items()
        for name in names
    },
    "SpecOptions": "fisherhub.options",
    "DataOptions": "fisherhub.options",
    "SketchJobOptions": "fisherhub.options",
    "GenerationOptions": "fisherhub.options",
    "sign_adapter_from_generations": "fisherhub.generation_signing",
    "HeadModel": "fisherhub.lm",
    "spec_for_model": "fisherhub.lm",
    "load_model_and_tokenizer": "fisherhub.lm",
    "sketch": "fisherhub.pipeline",
    "sketch_dataset": "fisherhub.pipeline",
    "sketch_texts": "fisherhub.pipeline",
    "select_adapter": "fisherhub.selection",
    "Selection": "fisherhub.selection",
    "load_signature": "fisherhub.hub",
    "push_signature": "fisherhub.hub",
    "verify_signature": "fisherhub.verify",
    "install_metric": "fisherhub.metric",
    "metric_path": "fisherhub.metric",
    "uninstall_metric": "fisherhub.metric",
}
#: the names before fisherhub 0.3, kept for one release (not in ``__all__``)
_ALIASES = {"DataArgs": "fisherhub.options", "SketchArgs": "fisherhub.options"}
__all__ = sorted([*_EXPORTS, "__version__"])
# neither cached nor listed by dir(): help(fisherhub) stays the page above, however many names are in use
__getattr__, _ = lazy_attributes(__name__, {**_EXPORTS, **_ALIASES}, cache=False)
