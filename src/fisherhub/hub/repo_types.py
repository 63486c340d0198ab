"""The repo types fisherhub reads and writes signatures in, without ``huggingface_hub`` (the CLI's parsers read
them before anything heavy is imported)."""

#: repo types signatures are read from; pushes go to the first two (a Space has no card section for them)
REPO_TYPES = ("model", "dataset", "space")
PUSH_REPO_TYPES = REPO_TYPES[:2]
#: the type of a bare ``org/name``: a model (adapter) repo, as in ``hf://`` URIs and ``huggingface_hub``
DEFAULT_REPO_TYPE = "model"
