"""Datasets in, tokenized documents with global indices out: ``sources`` (load and check a dataset),
``tokenization`` (a row -> input_ids and labels), ``batches`` (documents and padded batches), ``stream`` (the
documents of one process of N, resumable), ``files`` (data file builders), and the demo domains (``demo``)."""
