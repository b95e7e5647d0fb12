"""`make mutate`: mutation testing of the billing code (docs/testing.md)."""
