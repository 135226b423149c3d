"""NVFP4 quantisation: the format, autograd GEMMs, the substitution pass, backends."""
