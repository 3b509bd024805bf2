/* `llmbus-bench serve` understands `vllm bench serve`'s flags (vLLM benchmarks/serve.py,
 * vllm/benchmarks/datasets.py): the backend's endpoint and --host/--port (bench.h); the other
 * spellings are aliases in bench_serve.c's flag table. */
#include <stdio.h>
#include <string.h>

#include "cmd/bench/bench.h"

const char *bench_backend_endpoint(const char *backend) {
  static const char *const completions[] = {"vllm", "openai", "sglang", "lmdeploy", "tgi", "llama.cpp"};
  static const char *const chat[] = {"openai-chat", "vllm-chat"};
  for (size_t i = 0; i < sizeof completions / sizeof completions[0]; i++)
    if (!strcmp(backend, completions[i])) return "/v1/completions";
  for (size_t i = 0; i < sizeof chat / sizeof chat[0]; i++)
    if (!strcmp(backend, chat[i])) return "/v1/chat/completions";
  return NULL;
}

bool bench_base_url_of(const char *host, const char *port, char *out, size_t cap) {
  if (!host) host = "127.0.0.1";
  if (!port) port = "8000";
  if (!*host || strpbrk(host, ":/[]") || !*port || strspn(port, "0123456789") != strlen(port) || strlen(port) > 5)
    return false;
  int n = snprintf(out, cap, "http://%s:%s", host, port);
  return n > 0 && (size_t)n < cap;
}
