"""The fixed prompt set an adapter's own samples continue when its card names no data to sketch (SPEC §3b):
an empty prompt (the model's start-of-text token alone: what the adapter writes unprompted) and short, generic
openings of prose, dialogue, instructions, code, lists and data, so an adapter trained on any kind of text has a
prompt it continues in its own way. Changing the prompts changes every generated signature: a new set gets a new
``PROMPT_SET`` id, which each signature records."""

from __future__ import annotations

#: the id a generated signature records (``generation_prompts`` in its metadata)
PROMPT_SET = "fisherhub-generic-v1"
#: sample i continues ``PROMPTS[i % len(PROMPTS)]``
PROMPTS: tuple[str, ...] = (
    "",
    "The",
    "Once upon a time",
    "In this article, we",
    "Question:",
    "Answer:",
    "User: Hello! Can you help me with something?\nAssistant:",
    "Here is a summary of the main points:",
    "def ",
    "import ",
    "# Introduction\n\n",
    "1.",
    "Dear",
    "The results show that",
    "Step 1:",
    "Translate the following text:",
    "Abstract:",
    "In 1998,",
    "Instructions:",
    "Title:",
    "Input:",
    "Hi,",
    "According to",
    "The following is",
    "Chapter 1\n\n",
    "Q:",
    "<html>",
    "SELECT",
    "Let me explain.",
    "Today",
    "Example:",
    "Note:",
    "The sequence is",
)
