"""Datasets in, tokenized documents with global indices out (``documents``), and the demo domains (``demo``)."""
