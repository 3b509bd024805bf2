/* Byte DFAs of structured output: products (a string's pattern and format and length, a
 * number's bounds and multipleOf meet here), trimming to states that can still finish, the
 * distance to acceptance (a number's byte cap), and the code-point ranges a \uXXXX escape may
 * still take. Every DFA handed to the matcher is trimmed: a walk never reaches a state from
 * which the value cannot end. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/u64map.h"
#include "model/structured/so_internal.h"

void so_dfa_free(struct so_dfa *d) {
  if (!d) return;
  free(d->next);
  free(d->accept);
  free(d->dist);
  memset(d, 0, sizeof(*d));
}

static llb_status dfa_alloc(struct so_dfa *d, int32_t n) {
  memset(d, 0, sizeof(*d));
  d->next = malloc((size_t)(n ? n : 1) * 256 * sizeof(int32_t));
  d->accept = calloc((size_t)(n ? n : 1), 1);
  if (!d->next || !d->accept) {
    so_dfa_free(d);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "DFA of %d states", n);
  }
  memset(d->next, 0xff, (size_t)(n ? n : 1) * 256 * sizeof(int32_t));
  d->n = n;
  return LLB_STATUS_OK;
}

/* The key of the pair of states (a, b) in the product's map (pair -> product state id + 1, a
 * base/u64map). -1 stands for "dead" on a side. */
static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1); }

static int32_t pair_find(const struct llb_u64map *t, uint64_t key) {
  return (int32_t)(intptr_t)llb_u64map_get(t, key) - 1;
}

static llb_status pair_add(struct llb_u64map *t, uint64_t key, int32_t id) {
  return llb_u64map_put(t, key, (void *)(intptr_t)(id + 1));
}

llb_status so_dfa_product(const struct so_dfa *a, const struct so_dfa *b, bool either, struct so_dfa *out) {
  so_dfa_free(out);
  /* room for every pair (a side may also be dead: one more state each), at most the bound */
  const int64_t pairs = ((int64_t)a->n + 1) * ((int64_t)b->n + 1);
  const int32_t room = pairs < SO_DFA_MAX_STATES ? (int32_t)pairs : SO_DFA_MAX_STATES;
  struct llb_u64map *t = NULL;
  int32_t *pa = malloc((size_t)room * sizeof(int32_t)), *pb = malloc((size_t)room * sizeof(int32_t));
  struct so_dfa d;
  llb_status st = dfa_alloc(&d, room);
  if (st == LLB_STATUS_OK) st = llb_u64map_create(&t);
  if (st == LLB_STATUS_OK && (!pa || !pb)) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "DFA product");
  if (st != LLB_STATUS_OK) goto done;
  int32_t n = 0;
  const bool a_live = a->n > 0, b_live = b->n > 0;
  if (either ? (a_live || b_live) : (a_live && b_live)) {
    st = pair_add(t, pair_key(a_live ? 0 : -1, b_live ? 0 : -1), 0);
    pa[0] = a_live ? 0 : -1;
    pb[0] = b_live ? 0 : -1;
    n = 1;
  }
  for (int32_t i = 0; i < n && st == LLB_STATUS_OK; i++) {
    const int32_t sa = pa[i], sb = pb[i];
    d.accept[i] = either ? (uint8_t)((sa >= 0 && a->accept[sa]) || (sb >= 0 && b->accept[sb]))
                         : (uint8_t)(a->accept[sa] && b->accept[sb]);
    for (int c = 0; c < 256; c++) {
      const int32_t na = sa >= 0 ? a->next[(size_t)sa * 256 + (size_t)c] : -1;
      const int32_t nb = sb >= 0 ? b->next[(size_t)sb * 256 + (size_t)c] : -1;
      if (either ? (na < 0 && nb < 0) : (na < 0 || nb < 0)) continue;
      const uint64_t key = pair_key(na, nb);
      int32_t id = pair_find(t, key);
      if (id < 0) {
        if (n == room) { /* only when room is the bound: the pairs fit otherwise */
          st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "constraints need more than %d automaton states", SO_DFA_MAX_STATES);
          break;
        }
        id = n++;
        if ((st = pair_add(t, key, id)) != LLB_STATUS_OK) break;
        pa[id] = na;
        pb[id] = nb;
      }
      d.next[(size_t)i * 256 + (size_t)c] = id;
    }
  }
  if (st == LLB_STATUS_OK) {
    d.n = n;
    st = so_dfa_trim(&d);
  }
  if (st == LLB_STATUS_OK && d.n > 0) { /* give back the room of the states never reached */
    int32_t *next = realloc(d.next, (size_t)d.n * 256 * sizeof(int32_t));
    if (next) d.next = next;
  }
  if (st == LLB_STATUS_OK) {
    *out = d;
    memset(&d, 0, sizeof(d));
  }
done:
  so_dfa_free(&d);
  free(pa);
  free(pb);
  llb_u64map_destroy(t);
  return st;
}

llb_status so_dfa_intersect(struct so_dfa *a, const struct so_dfa *b) {
  struct so_dfa out = {0};
  llb_status st = so_dfa_product(a, b, false, &out);
  if (st != LLB_STATUS_OK) return st;
  so_dfa_free(a);
  *a = out;
  return LLB_STATUS_OK;
}

llb_status so_dfa_trim(struct so_dfa *d) {
  if (d->n == 0) return LLB_STATUS_OK;
  const size_t n = (size_t)d->n;
  /* reverse edges in CSR form, then a backward search from the accepting states */
  int32_t *count = calloc(n + 1, sizeof(int32_t)), *stack = malloc(n * sizeof(int32_t));
  int32_t *renum = malloc(n * sizeof(int32_t));
  uint8_t *live = calloc(n, 1);
  int32_t *from = NULL;
  llb_status st = LLB_STATUS_OK;
  if (!count || !stack || !renum || !live) goto oom;
  size_t edges = 0;
  for (size_t i = 0; i < n * 256; i++)
    if (d->next[i] >= 0) count[d->next[i] + 1]++, edges++;
  for (size_t i = 0; i < n; i++) count[i + 1] += count[i];
  from = malloc((edges ? edges : 1) * sizeof(int32_t));
  if (!from) goto oom;
  {
    int32_t *fill = stack; /* reused as the fill cursor */
    memcpy(fill, count, n * sizeof(int32_t));
    for (size_t i = 0; i < n * 256; i++)
      if (d->next[i] >= 0) from[fill[d->next[i]]++] = (int32_t)(i / 256);
  }
  int32_t top = 0;
  for (size_t i = 0; i < n; i++)
    if (d->accept[i]) live[i] = 1, stack[top++] = (int32_t)i;
  while (top > 0) {
    const int32_t s = stack[--top];
    for (int32_t e = count[s]; e < count[s + 1]; e++)
      if (!live[from[e]]) live[from[e]] = 1, stack[top++] = from[e];
  }
  int32_t m = 0;
  for (size_t i = 0; i < n; i++) renum[i] = live[i] && live[0] ? m++ : -1;
  for (size_t i = 0; i < n; i++) {
    if (renum[i] < 0) continue;
    int32_t *dst = d->next + (size_t)renum[i] * 256;
    const int32_t *src = d->next + i * 256;
    for (int c = 0; c < 256; c++) dst[c] = src[c] >= 0 ? renum[src[c]] : -1; /* dst <= src: safe in place */
    d->accept[renum[i]] = d->accept[i];
  }
  d->n = m;
  free(d->dist);
  d->dist = NULL;
  goto done;
oom:
  st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "DFA trim");
done:
  free(count);
  free(stack);
  free(renum);
  free(live);
  free(from);
  return st;
}

llb_status so_dfa_set_dist(struct so_dfa *d) {
  free(d->dist);
  d->dist = malloc((size_t)(d->n ? d->n : 1));
  if (!d->dist) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "DFA distances");
  for (int32_t i = 0; i < d->n; i++) d->dist[i] = d->accept[i] ? 0 : 255;
  /* Bellman-Ford rounds: distances only fall, 255 rounds at most (the cap). */
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < d->n; i++)
      for (int c = 0; c < 256; c++) {
        const int32_t t = d->next[(size_t)i * 256 + (size_t)c];
        if (t >= 0 && d->dist[t] < 254 && d->dist[t] + 1 < d->dist[i]) {
          d->dist[i] = (uint8_t)(d->dist[t] + 1);
          changed = true;
        }
      }
  }
  return LLB_STATUS_OK;
}

llb_status so_dfa_code_points(int64_t min, int64_t max, struct so_dfa *out) {
  so_dfa_free(out);
  const int64_t top = max >= 0 ? max : min; /* states 0..top code points; unbounded loops at top */
  if (top > SO_DFA_MAX_STATES - 2)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "string length bound %lld over %d beside a pattern or format",
                    (long long)top, SO_DFA_MAX_STATES - 2);
  llb_status st = dfa_alloc(out, (int32_t)top + 1);
  if (st != LLB_STATUS_OK) return st;
  for (int64_t s = 0; s <= top; s++) {
    out->accept[s] = s >= min;
    const int32_t lead = s < top ? (int32_t)s + 1 : max < 0 ? (int32_t)s : -1;
    for (int c = 0; c < 256; c++)
      out->next[s * 256 + c] = (c & 0xc0) == 0x80 ? (int32_t)s : lead; /* continuation bytes keep the count */
  }
  return LLB_STATUS_OK;
}

/* Walks the UTF-8 bytes of code points lo..hi, all of `len` bytes, byte `k` onward from s:
 * true when one of them reaches a state (every state of a trimmed DFA can finish). */
static bool range_walk(const struct so_dfa *d, int32_t s, uint32_t lo, uint32_t hi, int len, int k) {
  const int shift = 6 * (len - 1 - k);
  const uint32_t first = lo >> shift, last = hi >> shift, low_bits = (1u << shift) - 1;
  static const uint8_t lead_tag[] = {0, 0x00, 0xc0, 0xe0, 0xf0};
  for (uint32_t v = first; v <= last; v++) {
    const uint32_t group = k == 0 ? v : (v & 0x3f);
    const uint8_t byte = (uint8_t)(k == 0 ? (lead_tag[len] | group) : (0x80 | group));
    const int32_t t = d->next[(size_t)s * 256 + byte];
    if (t < 0) continue;
    if (shift == 0) return true;
    const uint32_t sub_lo = v == first ? lo & low_bits : 0, sub_hi = v == last ? hi & low_bits : low_bits;
    if (range_walk(d, t, (v << shift) | sub_lo, (v << shift) | sub_hi, len, k + 1)) return true;
  }
  return false;
}

bool so_dfa_range_possible(const struct so_dfa *d, int32_t s, uint32_t lo, uint32_t hi) {
  static const uint32_t bounds[][2] = {{0, 0x7f}, {0x80, 0x7ff}, {0x800, 0xd7ff}, {0xe000, 0xffff}, {0x10000, 0x10ffff}};
  static const int lens[] = {1, 2, 3, 3, 4};
  for (int i = 0; i < 5; i++) {
    const uint32_t a = lo > bounds[i][0] ? lo : bounds[i][0], b = hi < bounds[i][1] ? hi : bounds[i][1];
    if (a <= b && range_walk(d, s, a, b, lens[i], 0)) return true;
  }
  return false;
}
