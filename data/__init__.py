"""Raw Amazon Reviews 2014 files and the synthetic generator -> catalogs, histories, splits, grain pipelines."""
