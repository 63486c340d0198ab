"""What the ``fisherhub`` sub-commands share: arguments built from the options dataclasses (``arguments``), the
one output policy (``outputs``), the REPO argument (``repo_arguments``), the process group of a launcher
(``process_group``) and the allocator setting (``allocator``)."""
