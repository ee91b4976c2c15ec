"""Loaded by the benchmark's llama-cpp-python server with `--server-plain-cpu` (run.py puts this folder first on its
PYTHONPATH): models load without llama.cpp's "extra buffer types". On a CPU that reports AMX inside some VMs the AMX
weight repacking crashes the server (SIGSEGV in llama_decode on every batch of more than one token); the plain CPU
path works. A tool of the benchmark, never imported by Clear."""

import llama_cpp.llama_cpp as _llama

_default_params = _llama.llama_model_default_params


def _plain_cpu_params():
    params = _default_params()
    params.use_extra_bufts = False
    return params


_llama.llama_model_default_params = _plain_cpu_params
