"""The HTTP side's security: --web.config.file (TLS, basic auth, headers) and request limits."""
