"""One file a schema revision, oldest first: 0001 the tables, 0002 what the queries need indexed."""
