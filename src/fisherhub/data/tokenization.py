"""One row -> one document's (input_ids, labels): text scored whole (a column of token ids, tokenized already,
as it is), or chat messages rendered with the tokenizer's chat template with only the assistant tokens scored
(labels follow the Hugging Face convention: aligned with ``input_ids``, −100 = not scored)."""

from __future__ import annotations

from typing import Any

from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.core.errors import InputError
from fisherhub.options import DataOptions


class DocumentTokenizer:
    """Turns one row into (input_ids, labels), truncated to ``max_length`` tokens."""

    def __init__(self, tokenizer, args: DataOptions):
        self.tokenizer = tokenizer
        self.args = args
        if args.messages_column:
            if not getattr(tokenizer, "chat_template", None):
                raise InputError("a messages column needs a tokenizer with a chat template (tokenizer.chat_template)")
            if not getattr(tokenizer, "is_fast", False):
                raise InputError("the assistant-only mask of chat data needs a fast tokenizer (character offsets)")

    def __call__(self, row: dict[str, Any]) -> tuple[list[int], list[int]]:
        value = row[self.args.column]
        if self.args.messages_column:
            return self._chat(value)
        if not isinstance(value, str):
            ids = _token_ids(value)
            if ids is None:
                raise InputError(
                    f"column {self.args.column!r} must hold strings (or token ids), got {type(value).__name__}"
                )
            return ids[: self.args.max_length], ids[: self.args.max_length]
        ids = self.tokenizer(value, truncation=True, max_length=self.args.max_length)["input_ids"]
        return list(ids), list(ids)

    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _chat(self, messages: Any) -> tuple[list[int], list[int]]:
        """Score the characters each assistant turn adds after the generation prompt (its content + end tag)."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise InputError(f"column {self.args.column!r} must hold lists of {{'role', 'content'}} messages")
        text = self._render(messages)
        spans = []
        for turn, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prompt = self._render(messages[:turn], generation_prompt=True)
            through = self._render(messages[: turn + 1])
            if not (through.startswith(prompt) and text.startswith(through)):
                raise InputError(
                    "the tokenizer's chat template does not render conversations incrementally (a prefix of the "
                    "conversation is not a prefix of its rendering), so the assistant tokens cannot be located"
                )
            spans.append((len(prompt), len(through)))
        encoding = self.tokenizer(
            text,
            add_special_tokens=False,
            return_offsets_mapping=True,
            truncation=True,
            max_length=self.args.max_length,
        )
        ids = list(encoding["input_ids"])
        labels = [
            token if any(start <= begin < end for start, end in spans) else IGNORE_INDEX
            for token, (begin, _) in zip(ids, encoding["offset_mapping"])
        ]
        return ids, labels


def _token_ids(value: Any) -> list[int] | None:
    """``value`` as token ids when it is a sequence of integers (a list, or an array / tensor of a dataset in
    numpy / torch format), else None."""
    values = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(values, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in values):
        return list(values)
    return None
