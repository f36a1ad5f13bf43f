"""Training and evaluating the harness optimizer's patch engineer (not installed with the package).

``train_engineer.py`` (SFT, then GRPO whose reward is the measured rerun improvement),
``build_sft_dataset.py`` (failure packet → accepted patch pairs from a store), ``ablations.py``
(baselines and ablations into ``docs/research.md``) and ``serve_openai.py`` (a local model behind
an OpenAI-compatible server) are the entry points; ``docs/research.md`` is the guide. Everything
here needs the ``research`` extra and runs offline: models come from a local checkpoint, a GGUF
file or are built from a config (``tiny``).
"""
