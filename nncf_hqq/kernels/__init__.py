"""OpenVINO-compiled versions of the maths in ``nncf_hqq.maths``, each behind a guard with the reference beside it."""
