"""Search spaces shipped with spectune (YAML files), installed as tuner.search_spaces."""
