"""Feeding classifiers: features read back as numpy (features), scikit-learn and ``encode`` (vectorizer),
``longbert probe`` on a corpus or on features files (probe, probe_files), its sample and folds (folds) and
its charts (probe_plot).
"""
