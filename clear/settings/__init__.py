"""Settings modules: `base` for every deployment, `test` for the test suite."""
