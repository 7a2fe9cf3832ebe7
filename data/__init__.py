"""Everything from outside: GPU and model catalogs, workload parsing, measurement schema, importers, collector."""
