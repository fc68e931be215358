"""The built-in checks: one module per check, each registering itself when imported."""
