"""Plain Python views of the messages a client sends and receives (field names as in
schemas/*.fbs, which follow vLLM's vllm/sampling_params.py and vllm/outputs.py)."""
from dataclasses import dataclass, field
from typing import List, Optional

OUTPUT_KINDS = {"cumulative": 0, "delta": 1, "final_only": 2}
FINISH_REASONS = {0: None, 1: "stop", 2: "length", 3: "abort", 4: "error"}


@dataclass
class SamplingParams:
    """vLLM's SamplingParams, as far as schemas/common.fbs carries them. seed None lets the
    client draw one (so that a request sent again repeats the same tokens)."""
    n: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 0
    stop: List[str] = field(default_factory=list)
    stop_token_ids: List[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logprobs: Optional[int] = None
    output_kind: str = "cumulative"   # "cumulative", "delta" or "final_only"
    truncate_prompt_tokens: int = 0


@dataclass
class Logprob:
    token_id: int
    logprob: float
    rank: int
    decoded: str
    top: List["Logprob"] = field(default_factory=list)


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: float
    logprobs: List[Logprob]
    finish_reason: Optional[str]      # None while running, then "stop", "length", "abort", "error"
    stop_reason: Optional[str]


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float
    first_token_time: float
    last_token_time: float
    finished_time: float
    num_cached_tokens: int
    num_prompt_tokens: int
    num_generation_tokens: int


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool
    metrics: Optional[RequestMetrics] = None


@dataclass
class EngineStatus:
    """One engine, from its latest SchedulerStats."""
    engine_id: str
    model: str
    num_running_reqs: int
    num_waiting_reqs: int
    kv_cache_usage: float
    num_free_blocks: int
    num_total_blocks: int
    max_model_len: int
    step: int
    draining: bool


@dataclass
class ActorStatus:
    """One actor process, from its latest Heartbeat."""
    actor: str
    instance: str
    engine_id: str
    pid: int
    host: str
    ready: bool
    inflight: int
    uptime_s: float


@dataclass
class Status:
    engines: List[EngineStatus]
    actors: List[ActorStatus]
