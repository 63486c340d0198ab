"""Sign an adapter where it is made: a ``transformers`` ``TrainerCallback`` (TRL's trainers take it too).

At the start of training it sketches the training data under the base model, before the adapter changes
anything (a PEFT model's adapters are disabled while it sketches), and writes the signature into
``output_dir`` as ``fisherhub push`` writes it into a folder (``.fisher_signatures/<name>.safetensors``, the
index and an adapter card section). It writes it again into every checkpoint folder and into ``output_dir``
before each push, so the Trainer's own upload of ``output_dir`` (``push_to_hub=True``, every
``hub_strategy``) carries the signature in the same commit as the adapter. It tags the model
(``add_model_tags``), so the card ``trainer.push_to_hub()`` rewrites at the end keeps the ``fisher-signatures``
tag; for a PEFT model, whose ``create_or_update_model_card`` the Trainer calls on that card, it writes the
signature block, section and ``datasets:`` back into the card right after (the index lists the signature
in any case).

The data is a list of texts, or a dataset (or Hub id, data file) whose ``text_column`` is sketched (default
``"text"``); a dataset without such a column that is tokenized already (an ``input_ids`` column, what a Trainer's
datasets hold) is sketched from its token ids, the padding its ``attention_mask`` marks dropped. A dataset with
neither is refused when the callback is made, naming its columns and ``text_column=``.

Signing never stops training: a failure is logged (``logging`` and ``callback.failure``) and the run goes
on without a signature. Documents are truncated at the trainer's ``max_length`` (TRL's ``SFTConfig``), or
512 where the arguments have none; a ``max_length`` given to the callback that differs from the trainer's
is refused at train begin (the signature would describe other data than the adapter was trained on).

    from fisherhub.training_callback import FisherSignatureCallback
    trainer = SFTTrainer(model=peft_model, train_dataset=train, args=config,
                         callbacks=[FisherSignatureCallback(train, dataset_name="org/my-data")])
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from fisherhub.core.errors import InputError
from fisherhub.core.signature import Signature
from fisherhub.hub import push_signature
from fisherhub.hub.cards import SIGNATURE_TAG
from fisherhub.options import DataOptions
from fisherhub.pipeline.loop import sketch_dataset, sketch_texts

logger = logging.getLogger(__name__)

#: the token ids of a tokenized dataset, sketched when it has no text column (and none was named)
TOKEN_IDS_COLUMN = "input_ids"
#: where a tokenized dataset marks padding (0) among its token ids
ATTENTION_MASK_COLUMN = "attention_mask"


def _base_model_name(model: Any) -> str | None:
    """The base model a PEFT model was made from (its adapter config), else the (base) model's config name."""
    configs = getattr(model, "peft_config", None) or {}
    adapter = configs.get(getattr(model, "active_adapter", None)) or next(iter(configs.values()), None)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(adapter, "base_model_name_or_path", None) or getattr(base.config, "name_or_path", None) or None


@contextlib.contextmanager
def _as_base_model(model: Any):
    """``model`` in eval mode with its PEFT adapters disabled (a plain model as it is) and running its class's
    own forward: without the mixed-precision autocast that ``accelerate`` sets as a prepared model's instance
    ``forward`` under bf16 / fp16 (the signature is of the weights as they are, as a plain ``sketch_texts``
    makes it), all restored afterwards."""
    training, patched = model.training, model.__dict__.get("forward")
    disabled = model.disable_adapter() if hasattr(model, "disable_adapter") else contextlib.nullcontext()
    model.eval()
    if patched is not None:
        del model.forward
    try:
        with disabled:
            yield model
    finally:
        model.train(training)
        if patched is not None:
            model.forward = patched


def _training_documents(data: Any, text_column: str | None, max_documents: int | None) -> DataOptions:
    """What the callback sketches of a dataset, Hub id or data file: its ``text_column`` (default ``"text"``),
    else, none named, its ``input_ids`` when it has them. A dataset whose columns are known and hold neither is
    refused, naming them (a Hub id or file is checked when it loads, at train begin)."""
    columns = getattr(data, "column_names", None)
    column = text_column or DataOptions.text_column
    if columns is not None and column not in columns:
        if text_column is not None or TOKEN_IDS_COLUMN not in columns:
            texts = [name for name, feature in (getattr(data, "features", None) or {}).items() if _holds_text(feature)]
            example = texts[0] if len(texts) == 1 else "<the column of texts>"
            raise InputError(
                f"FisherSignatureCallback: the dataset has no column {column!r}; its columns are {sorted(columns)}. "
                f"Pass text_column={example!r}, or the tokenized dataset the Trainer trains on (its "
                f"{TOKEN_IDS_COLUMN!r} are sketched)"
            )
        column = TOKEN_IDS_COLUMN
    return DataOptions(data, text_column=column, max_documents=max_documents)


def _holds_text(feature: Any) -> bool:
    return getattr(feature, "dtype", None) in ("string", "large_string")


def _without_padding(data: DataOptions) -> DataOptions:
    """``data`` whose token-id column drops the positions its ``attention_mask`` marks as padding (0); as it is
    without such a mask, or for a column of texts. A map-style dataset is mapped in memory (its first
    ``max_documents`` rows), a stream as it is read."""
    import datasets

    dataset = data.dataset
    columns = getattr(dataset, "column_names", None) or ()
    if data.text_column != TOKEN_IDS_COLUMN or ATTENTION_MASK_COLUMN not in columns:
        return data

    def unpadded(row: dict[str, Any]) -> dict[str, list[int]]:
        ids, mask = (_as_list(row[column]) for column in (TOKEN_IDS_COLUMN, ATTENTION_MASK_COLUMN))
        return {TOKEN_IDS_COLUMN: [token for token, kept in zip(ids, mask) if kept]}

    if isinstance(dataset, datasets.Dataset):
        if data.max_documents is not None:
            dataset = dataset.select(range(min(len(dataset), data.max_documents)))
        return dataclasses.replace(data, dataset=dataset.map(unpadded, keep_in_memory=True))
    return dataclasses.replace(data, dataset=dataset.map(unpadded))


def _as_list(values: Any) -> list[int]:
    """A row's token ids or mask as a list (a dataset in numpy / torch format gives arrays / tensors)."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


class _CardUpdateThenAttach:
    """A model's ``create_or_update_model_card``, then the callback's ``attach`` of the same folder (a model
    whose method is one of these is signed already)."""

    def __init__(self, update: Callable[[str], None], attach: Callable[[str], None]):
        self.update, self.attach = update, attach

    def __call__(self, output_dir: str) -> None:
        self.update(output_dir)
        self.attach(output_dir)


class FisherSignatureCallback(TrainerCallback):
    """Sketches the training data under the base model at train begin and attaches the signature to the
    adapter in ``output_dir``, every checkpoint and every push (see the module docstring).

    ``data``: the training texts (a list of strings), a ``datasets`` Dataset / Hub id / data file (its
    ``text_column``, default ``"text"``, is sketched; a tokenized dataset without one, its ``input_ids``), or a
    ``DataOptions``. ``dataset_name`` names the data in the signature (a
    Hub id is best; local paths are published as their file name). ``base_model``: default the adapter
    config's ``base_model_name_or_path`` (or the model's ``name_or_path``). ``tokenizer``: default the
    trainer's ``processing_class``. ``max_length``: default the trainer's (``SFTConfig.max_length``), else 512;
    another one than the trainer's is refused. ``spec_options`` (m, seed, estimator, ...) or ``like`` (a
    signature to be comparable with) go to the sketcher. The signature is in ``callback.signature`` after
    train begin (None and ``callback.failure`` saying why, when signing failed).
    """

    def __init__(
        self,
        data: Sequence[str] | DataOptions | Any,
        *,
        dataset_name: str | None = None,
        base_model: str | None = None,
        tokenizer: Any = None,
        text_column: str | None = None,
        max_documents: int | None = None,
        max_length: int | None = None,
        batch_size: int = 8,
        like: Signature | None = None,
        progress: bool = True,
        **spec_options: Any,
    ):
        if isinstance(data, str) or not isinstance(data, Sequence):
            data = data if isinstance(data, DataOptions) else _training_documents(data, text_column, max_documents)
        elif not data or not all(isinstance(text, str) for text in data):
            raise InputError(
                "FisherSignatureCallback: data must be a list of texts (at least one), a dataset or a DataOptions"
            )
        self.data, self.dataset_name, self.base_model, self.tokenizer = data, dataset_name, base_model, tokenizer
        self.max_length, self.batch_size, self.like, self.progress = max_length, batch_size, like, progress
        self.spec_options = spec_options
        self.signature: Signature | None = None
        self.failure: str | None = None  # why signing failed (training went on), None when it did not

    def _max_length(self, args) -> int:
        """The trainer's ``max_length`` (TRL's configs), refused when the callback was given another one."""
        trainer_length = getattr(args, "max_length", None)
        if self.max_length is not None and trainer_length is not None and self.max_length != trainer_length:
            raise InputError(
                f"FisherSignatureCallback(max_length={self.max_length}) but the trainer truncates at max_length="
                f"{trainer_length}: the signature would describe other data than the adapter sees. Drop the "
                "callback's max_length (it follows the trainer's) or make them equal"
            )
        return self.max_length or trainer_length or DataOptions.max_length

    def _sketch(self, model: Any, tokenizer: Any, max_length: int) -> Signature:
        base_model = self.base_model or _base_model_name(model)
        if not base_model:
            raise InputError(
                "FisherSignatureCallback: the model does not say its base model; pass base_model='<org/name>'"
            )
        metadata = {"base_model": base_model, **({"dataset": self.dataset_name} if self.dataset_name else {})}
        common = {"batch_size": self.batch_size, "metadata": metadata, "progress": self.progress, **self.spec_options}
        with _as_base_model(model):
            if isinstance(self.data, DataOptions):
                data = _without_padding(
                    self.data
                    if self.data.max_length == max_length
                    else dataclasses.replace(self.data, max_length=max_length)
                )
                return sketch_dataset(
                    data.dataset,
                    model,
                    tokenizer,
                    self.like,
                    data=data,
                    description="sketching the training data",
                    **common,
                )
            return sketch_texts(self.data, model, tokenizer, self.like, max_length=max_length, **common)

    def _attach(self, *folders: str) -> None:
        """The signature into each folder as an adapter's (its card an adapter card, whatever the folder holds
        yet); a failure is logged, never raised into the training loop."""
        if self.signature is None:
            return
        for folder in folders:
            try:
                os.makedirs(folder, exist_ok=True)
                push_signature(self.signature, folder, repo_type="model")
            except Exception as exc:  # noqa: BLE001  (signing must never end a training run)
                self._failed(f"cannot write the signature into {folder}: {exc}")

    def _failed(self, reason: str) -> None:
        self.failure = reason
        logger.error("FisherSignatureCallback: %s; training goes on without it", reason)

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if not state.is_world_process_zero:
            return
        max_length = self._max_length(args)  # a mismatch is refused before the first step
        tokenizer = self.tokenizer or processing_class
        if model is not None and hasattr(model, "add_model_tags"):
            model.add_model_tags([SIGNATURE_TAG])  # kept by the card the Trainer writes on push_to_hub
        if model is not None and hasattr(model, "create_or_update_model_card"):
            self._sign_cards_of(model)
        if self.signature is None:
            try:
                if model is None or tokenizer is None:
                    raise InputError(
                        "FisherSignatureCallback needs the trainer's model and a tokenizer (pass tokenizer=)"
                    )
                self.signature = self._sketch(model, tokenizer, max_length)
            except Exception as exc:  # noqa: BLE001  (signing must never end a training run)
                self._failed(f"cannot sign the training data: {type(exc).__name__}: {exc}")
                return
        self._attach(args.output_dir)

    def _sign_cards_of(self, model: Any) -> None:
        """After PEFT's ``create_or_update_model_card`` (which the Trainer calls on the card it has just written
        into ``output_dir``), put the signature's block, section and ``datasets:`` back into that card."""
        update = model.create_or_update_model_card
        if not isinstance(update, _CardUpdateThenAttach):
            model.create_or_update_model_card = _CardUpdateThenAttach(update, self._attach)

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._attach(os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"), args.output_dir)

    def on_push_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._attach(args.output_dir)
