"""The benchmarks: each module measures one thing and writes its results (JSON, Markdown,
plots) to ``benchmarks/results/``; run one from the checkout's root as
``python -m benchmarks.NAME --help``. What they share is in :mod:`benchmarks._harness`."""
