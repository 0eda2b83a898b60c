"""ssmscan's ops: one folder per op, one file per realization."""
