"""One file a schema revision, oldest first: 0001 the tables, 0002 the SKU and the indexes the
questions use, 0003 covering indexes for the trend."""
