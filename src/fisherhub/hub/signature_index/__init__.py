"""A base model's published signatures gathered in one Hub dataset, the *signature index* (``fisherhub index``):
one row per signature, Parquet shards pushed with ``datasets`` (``push_to_hub``), a card whose ``configs:`` make
the Hub's viewer show it and ``load_dataset("org/name")`` load it, and ``fisherhub_index.json`` (the state file).
Not to be confused with a repo's own listing of its signatures, ``.fisher_signatures/index.json``
(``hub/listing.py``).

A row holds what ranking needs without the file: the sketch id and spec, counts, the split norms
⟨μ̂^A, μ̂^B⟩ and lengths ‖μ̂‖ of the three sketches, and the sketches of ``Layout.sketches`` (by default
the joint one only) as unit vectors μ̂/‖μ̂‖ in ``Layout.dtype`` (default float16; unit vectors keep the
entries near 1/√m, well inside float16's range). The error bars, regime and verdict come from the files
of the few best rows (``selection/index_ranking.py``).

``layout`` (which sketches a row stores, no numpy), ``schema`` (the row and state-file formats), ``rows``
(rows read back and checked), ``card`` (summary, card, heatmap), ``shards`` (which shard holds a repo's rows: an
update pushes its own as one more), ``store`` (push and load), ``build`` (build), ``update`` (update). Names are imported on first use, so ``layout`` loads without numpy.
"""

from fisherhub.core import lazy_attributes

_EXPORTS = {
    "DEFAULT_DTYPE": "fisherhub.hub.signature_index.layout",
    "DEFAULT_SKETCHES": "fisherhub.hub.signature_index.layout",
    "INDEX_DTYPES": "fisherhub.hub.signature_index.layout",
    "Layout": "fisherhub.hub.signature_index.layout",
    "CARD_COLUMNS": "fisherhub.hub.signature_index.schema",
    "DATA_DIR": "fisherhub.hub.signature_index.schema",
    "INDEX_FORMAT": "fisherhub.hub.signature_index.schema",
    "INDEX_TAG": "fisherhub.hub.signature_index.schema",
    "MAX_STATE_BYTES": "fisherhub.hub.signature_index.schema",
    "OBTAINED": "fisherhub.hub.signature_index.schema",
    "SPLIT": "fisherhub.hub.signature_index.schema",
    "STATE_KIND": "fisherhub.hub.signature_index.schema",
    "STATE_PATH": "fisherhub.hub.signature_index.schema",
    "card_fields": "fisherhub.hub.signature_index.schema",
    "conform": "fisherhub.hub.signature_index.schema",
    "parse_state": "fisherhub.hub.signature_index.schema",
    "render_state": "fisherhub.hub.signature_index.schema",
    "row_schema": "fisherhub.hub.signature_index.schema",
    "signature_row": "fisherhub.hub.signature_index.schema",
    "spec_json": "fisherhub.hub.signature_index.schema",
    "IndexRows": "fisherhub.hub.signature_index.rows",
    "MAX_METADATA_BYTES": "fisherhub.hub.signature_index.rows",
    "SkippedRow": "fisherhub.hub.signature_index.rows",
    "UNIT_TOLERANCE": "fisherhub.hub.signature_index.rows",
    "check_table_columns": "fisherhub.hub.signature_index.rows",
    "largest_rows": "fisherhub.hub.signature_index.rows",
    "nearest_neighbours": "fisherhub.hub.signature_index.rows",
    "read_rows": "fisherhub.hub.signature_index.rows",
    "row_alignments": "fisherhub.hub.signature_index.rows",
    "FIGURE_PATH": "fisherhub.hub.signature_index.card",
    "IndexSummary": "fisherhub.hub.signature_index.card",
    "NEIGHBOUR_ROWS": "fisherhub.hub.signature_index.card",
    "PLOTTED_ROWS": "fisherhub.hub.signature_index.card",
    "render_card": "fisherhub.hub.signature_index.card",
    "rows_figure": "fisherhub.hub.signature_index.card",
    "LoadedIndex": "fisherhub.hub.signature_index.store",
    "load_index": "fisherhub.hub.signature_index.store",
    "push_index": "fisherhub.hub.signature_index.store",
    "CHUNK_ROWS": "fisherhub.hub.signature_index.build",
    "InterruptedBuild": "fisherhub.hub.signature_index.build",
    "NEW_REPO_FILES": "fisherhub.hub.signature_index.build",
    "RepoResult": "fisherhub.hub.signature_index.build",
    "WorkFolder": "fisherhub.hub.signature_index.build",
    "build_index": "fisherhub.hub.signature_index.build",
    "changed_repos": "fisherhub.hub.signature_index.update",
    "check_push_target": "fisherhub.hub.signature_index.build",
    "default_work": "fisherhub.hub.signature_index.build",
    "listed_adapters": "fisherhub.hub.signature_index.build",
    "indexed_repos": "fisherhub.hub.signature_index.build",
    "read_repos": "fisherhub.hub.signature_index.build",
    "replace_repos": "fisherhub.hub.signature_index.update",
    "repo_rows": "fisherhub.hub.signature_index.build",
    "update_index": "fisherhub.hub.signature_index.update",
    "work_folder": "fisherhub.hub.signature_index.build",
    "index_ref": "fisherhub.hub.refs",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
