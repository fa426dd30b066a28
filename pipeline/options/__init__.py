"""A run's options: PipelineConfig and its sections, validated once (config), a feature's spec
(features_config), YAML and flat names (config_file), paths as they enter (paths), the click option table
(cli_options) and warnings about options that do nothing (option_warnings). No torch.
"""
