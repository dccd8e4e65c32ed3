"""Tooling around the library for LLMs: real models offline, the evaluation protocol, the ``nncf-hqq`` command
line and its demo. The library (everything else in ``nncf_hqq``) never imports this package."""
