"""The fixed probe text whose mean head input is the pilot activation mean (the sketch's reflection).

A few short documents from different domains, so that the mean is a typical activation of the model
rather than of one domain. Changing this text changes every new spec's reflection (and sketch id):
never edit it; add a new constant instead.
"""

PROBE_DOCUMENTS: tuple[str, ...] = (
    "The river rose overnight, and by morning the old stone bridge was closed to traffic while "
    "engineers inspected its arches for damage.",
    "def mean(values):\n    total = sum(values)\n    return total / len(values) if values else 0.0\n",
    "Photosynthesis converts light energy into chemical energy: carbon dioxide and water become "
    "glucose and oxygen inside the chloroplasts of plant cells.",
    "User: What is 17 times 3?\nAssistant: 17 times 3 is 51.",
    "Aspirin, CC(=O)OC1=CC=CC=C1C(=O)O, inhibits cyclooxygenase; the sequence ATGGCCATTGTAATGGGCCGC "
    "encodes the start of a protein.",
    "La ciudad despierta temprano: los mercados abren, los trenes llegan llenos y el café huele en cada esquina.",
)
