from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AskRequest(_message.Message):
    __slots__ = ("question", "top_k", "retrievers", "deadline_s", "documents", "min_confidence")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    RETRIEVERS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    MIN_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    question: str
    top_k: int
    retrievers: _containers.RepeatedScalarFieldContainer[str]
    deadline_s: float
    documents: _containers.RepeatedCompositeFieldContainer[Passage]
    min_confidence: float
    def __init__(self, question: _Optional[str] = ..., top_k: _Optional[int] = ..., retrievers: _Optional[_Iterable[str]] = ..., deadline_s: _Optional[float] = ..., documents: _Optional[_Iterable[_Union[Passage, _Mapping]]] = ..., min_confidence: _Optional[float] = ...) -> None: ...

class Documents(_message.Message):
    __slots__ = ("passages",)
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    passages: _containers.RepeatedCompositeFieldContainer[Passage]
    def __init__(self, passages: _Optional[_Iterable[_Union[Passage, _Mapping]]] = ...) -> None: ...

class AskBatchRequest(_message.Message):
    __slots__ = ("questions", "top_k", "retrievers", "deadline_s", "documents", "min_confidence")
    QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    RETRIEVERS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    MIN_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    questions: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    retrievers: _containers.RepeatedScalarFieldContainer[str]
    deadline_s: float
    documents: _containers.RepeatedCompositeFieldContainer[Documents]
    min_confidence: float
    def __init__(self, questions: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., retrievers: _Optional[_Iterable[str]] = ..., deadline_s: _Optional[float] = ..., documents: _Optional[_Iterable[_Union[Documents, _Mapping]]] = ..., min_confidence: _Optional[float] = ...) -> None: ...

class Passage(_message.Message):
    __slots__ = ("id", "title", "text", "source", "score")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    text: str
    source: str
    score: float
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., source: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("retriever", "answer", "score", "error", "token_logprobs", "confidence", "error_kind")
    RETRIEVER_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_KIND_FIELD_NUMBER: _ClassVar[int]
    retriever: str
    answer: str
    score: float
    error: str
    token_logprobs: _containers.RepeatedScalarFieldContainer[float]
    confidence: float
    error_kind: str
    def __init__(self, retriever: _Optional[str] = ..., answer: _Optional[str] = ..., score: _Optional[float] = ..., error: _Optional[str] = ..., token_logprobs: _Optional[_Iterable[float]] = ..., confidence: _Optional[float] = ..., error_kind: _Optional[str] = ...) -> None: ...

class AskReply(_message.Message):
    __slots__ = ("question", "answer", "retriever", "score", "margin", "candidates", "passages", "document", "missing", "latency_s", "reader_s", "voter", "ran", "stopped_at_stage", "stages", "final", "prompt_tokens", "cached_prompt_tokens", "generated_tokens", "confidence", "confidence_kind", "abstained", "guess", "under_load", "degraded")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    RETRIEVER_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    READER_S_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    RAN_FIELD_NUMBER: _ClassVar[int]
    STOPPED_AT_STAGE_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_KIND_FIELD_NUMBER: _ClassVar[int]
    ABSTAINED_FIELD_NUMBER: _ClassVar[int]
    GUESS_FIELD_NUMBER: _ClassVar[int]
    UNDER_LOAD_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    question: str
    answer: str
    retriever: str
    score: float
    margin: float
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    passages: _containers.RepeatedCompositeFieldContainer[Passage]
    document: str
    missing: _containers.RepeatedScalarFieldContainer[str]
    latency_s: float
    reader_s: float
    voter: str
    ran: _containers.RepeatedScalarFieldContainer[str]
    stopped_at_stage: int
    stages: int
    final: bool
    prompt_tokens: int
    cached_prompt_tokens: int
    generated_tokens: int
    confidence: float
    confidence_kind: str
    abstained: bool
    guess: str
    under_load: bool
    degraded: str
    def __init__(self, question: _Optional[str] = ..., answer: _Optional[str] = ..., retriever: _Optional[str] = ..., score: _Optional[float] = ..., margin: _Optional[float] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., passages: _Optional[_Iterable[_Union[Passage, _Mapping]]] = ..., document: _Optional[str] = ..., missing: _Optional[_Iterable[str]] = ..., latency_s: _Optional[float] = ..., reader_s: _Optional[float] = ..., voter: _Optional[str] = ..., ran: _Optional[_Iterable[str]] = ..., stopped_at_stage: _Optional[int] = ..., stages: _Optional[int] = ..., final: _Optional[bool] = ..., prompt_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., confidence: _Optional[float] = ..., confidence_kind: _Optional[str] = ..., abstained: _Optional[bool] = ..., guess: _Optional[str] = ..., under_load: _Optional[bool] = ..., degraded: _Optional[str] = ...) -> None: ...

class AskBatchReply(_message.Message):
    __slots__ = ("replies",)
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[AskReply]
    def __init__(self, replies: _Optional[_Iterable[_Union[AskReply, _Mapping]]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("prompts", "max_tokens", "temperature", "stop", "raw", "cue", "starts")
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    CUE_FIELD_NUMBER: _ClassVar[int]
    STARTS_FIELD_NUMBER: _ClassVar[int]
    prompts: _containers.RepeatedScalarFieldContainer[str]
    max_tokens: int
    temperature: float
    stop: _containers.RepeatedScalarFieldContainer[str]
    raw: bool
    cue: str
    starts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prompts: _Optional[_Iterable[str]] = ..., max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., stop: _Optional[_Iterable[str]] = ..., raw: _Optional[bool] = ..., cue: _Optional[str] = ..., starts: _Optional[_Iterable[str]] = ...) -> None: ...

class GenerateReply(_message.Message):
    __slots__ = ("outputs", "model")
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedScalarFieldContainer[str]
    model: str
    def __init__(self, outputs: _Optional[_Iterable[str]] = ..., model: _Optional[str] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthReply(_message.Message):
    __slots__ = ("status", "model", "retrievers", "reader_prompts", "reader_cache_hits", "reader_engine_calls", "reader_engine_prompts", "reader_mean_batch", "detail", "reader_prompt_tokens", "reader_generated_tokens", "reader_cached_tokens", "voter", "generator_model", "reader_in_flight", "unavailable", "placement", "readers", "index_generations")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[HealthReply.Status]
        SERVING: _ClassVar[HealthReply.Status]
        NOT_SERVING: _ClassVar[HealthReply.Status]
    UNKNOWN: HealthReply.Status
    SERVING: HealthReply.Status
    NOT_SERVING: HealthReply.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RETRIEVERS_FIELD_NUMBER: _ClassVar[int]
    READER_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    READER_CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    READER_ENGINE_CALLS_FIELD_NUMBER: _ClassVar[int]
    READER_ENGINE_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    READER_MEAN_BATCH_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    READER_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    READER_GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    READER_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_MODEL_FIELD_NUMBER: _ClassVar[int]
    READER_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    READERS_FIELD_NUMBER: _ClassVar[int]
    INDEX_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    status: HealthReply.Status
    model: str
    retrievers: _containers.RepeatedScalarFieldContainer[str]
    reader_prompts: int
    reader_cache_hits: int
    reader_engine_calls: int
    reader_engine_prompts: int
    reader_mean_batch: float
    detail: str
    reader_prompt_tokens: int
    reader_generated_tokens: int
    reader_cached_tokens: int
    voter: str
    generator_model: str
    reader_in_flight: int
    unavailable: _containers.RepeatedScalarFieldContainer[str]
    placement: _containers.RepeatedScalarFieldContainer[str]
    readers: _containers.RepeatedCompositeFieldContainer[ReaderHealth]
    index_generations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[HealthReply.Status, str]] = ..., model: _Optional[str] = ..., retrievers: _Optional[_Iterable[str]] = ..., reader_prompts: _Optional[int] = ..., reader_cache_hits: _Optional[int] = ..., reader_engine_calls: _Optional[int] = ..., reader_engine_prompts: _Optional[int] = ..., reader_mean_batch: _Optional[float] = ..., detail: _Optional[str] = ..., reader_prompt_tokens: _Optional[int] = ..., reader_generated_tokens: _Optional[int] = ..., reader_cached_tokens: _Optional[int] = ..., voter: _Optional[str] = ..., generator_model: _Optional[str] = ..., reader_in_flight: _Optional[int] = ..., unavailable: _Optional[_Iterable[str]] = ..., placement: _Optional[_Iterable[str]] = ..., readers: _Optional[_Iterable[_Union[ReaderHealth, _Mapping]]] = ..., index_generations: _Optional[_Iterable[str]] = ...) -> None: ...

class ReaderHealth(_message.Message):
    __slots__ = ("deployment", "model", "prompts", "cache_hits", "engine_calls", "engine_prompts", "prompt_tokens", "generated_tokens", "cached_tokens", "in_flight", "down")
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CALLS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DOWN_FIELD_NUMBER: _ClassVar[int]
    deployment: str
    model: str
    prompts: int
    cache_hits: int
    engine_calls: int
    engine_prompts: int
    prompt_tokens: int
    generated_tokens: int
    cached_tokens: int
    in_flight: int
    down: str
    def __init__(self, deployment: _Optional[str] = ..., model: _Optional[str] = ..., prompts: _Optional[int] = ..., cache_hits: _Optional[int] = ..., engine_calls: _Optional[int] = ..., engine_prompts: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., in_flight: _Optional[int] = ..., down: _Optional[str] = ...) -> None: ...

class RetrieveRequest(_message.Message):
    __slots__ = ("questions", "k", "sources")
    QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    questions: _containers.RepeatedScalarFieldContainer[str]
    k: int
    sources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, questions: _Optional[_Iterable[str]] = ..., k: _Optional[int] = ..., sources: _Optional[_Iterable[str]] = ...) -> None: ...

class SourceHits(_message.Message):
    __slots__ = ("source", "passages", "error")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    source: str
    passages: _containers.RepeatedCompositeFieldContainer[Passage]
    error: str
    def __init__(self, source: _Optional[str] = ..., passages: _Optional[_Iterable[_Union[Passage, _Mapping]]] = ..., error: _Optional[str] = ...) -> None: ...

class RetrieveResult(_message.Message):
    __slots__ = ("question", "sources")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    question: str
    sources: _containers.RepeatedCompositeFieldContainer[SourceHits]
    def __init__(self, question: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[SourceHits, _Mapping]]] = ...) -> None: ...

class RetrieveReply(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RetrieveResult]
    def __init__(self, results: _Optional[_Iterable[_Union[RetrieveResult, _Mapping]]] = ...) -> None: ...

class SetVoterWeightsRequest(_message.Message):
    __slots__ = ("weights_json",)
    WEIGHTS_JSON_FIELD_NUMBER: _ClassVar[int]
    weights_json: str
    def __init__(self, weights_json: _Optional[str] = ...) -> None: ...

class SetVoterWeightsReply(_message.Message):
    __slots__ = ("source", "retrievers")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    RETRIEVERS_FIELD_NUMBER: _ClassVar[int]
    source: str
    retrievers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, source: _Optional[str] = ..., retrievers: _Optional[_Iterable[str]] = ...) -> None: ...
