"""Raw Amazon 2014 files and the synthetic generator -> catalogs, histories, splits, pipelines."""
