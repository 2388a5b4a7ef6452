"""Language-model support: tiny offline causal LMs for tests and examples."""
