"""The retriever side of EoR, free of Ray and vLLM: knowledge sources (`sources/`), the paper's
spec strings (`spec.py`), the pool that turns a spec into passages and a reader answer
(`pool.py`), the reader protocol and its disk cache (`reader.py`), prompts, the dense encoder,
the registries, and the value types every layer passes around (`types.py`: `Candidate`,
`QuestionResult`, `Failure`)."""
