/* schemas codec, issue 36's KV transfer: KVConnectorMetadata (SchedulerOutput), KVConnectorOutput
 * (ModelRunnerOutput), KVFetchRequest and KVTransferChunk refuse hostile values both ways (the
 * encoder with INVALID_ARGUMENT, the decoder with MALFORMED naming the field): negative and huge
 * block ids and counts, block counts that do not match the tokens, non-finite or out-of-range
 * expiries, oversize or mis-sized data, a checksum that does not match, a NotReady chunk naming
 * an export generation; the generation round-trips and reads 0 when absent (old peers). The decoder side is
 * reached by encoding a valid message with a sentinel value and patching the sentinel's bytes
 * in the buffer (the verifier passes; the meaning does not). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schemas/kv_transfer.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"

#define S(lit) ((struct llb_str){(lit), sizeof(lit) - 1})

/* Replaces the one occurrence of the 4 bytes of `from` in buf[len] by those of `to`. */
static void patch4(uint8_t *buf, size_t len, const void *from, const void *to) {
  size_t at = SIZE_MAX;
  for (size_t i = 0; i + 4 <= len; i++)
    if (memcmp(buf + i, from, 4) == 0) {
      assert_true(at == SIZE_MAX); /* the sentinel is unique */
      at = i;
    }
  assert_true(at != SIZE_MAX);
  memcpy(buf + at, to, 4);
}

/* ---- KVConnectorMetadata ------------------------------------------------------------------- */

#define SENTINEL_BLOCK 0x5A5A1234
#define SENTINEL_TOKENS 33 /* 3 blocks of 16 */

static int32_t send_blocks[3] = {7, SENTINEL_BLOCK, 9};
static int32_t recv_blocks[2] = {40, 41};

static void fill_so(struct llb_scheduler_output *so, struct llb_kv_send_request *send,
                    struct llb_kv_recv_request *recv) {
  *send = (struct llb_kv_send_request){.req_id = S("p-1"), .block_ids = send_blocks, .num_block_ids = 3,
                                       .num_tokens = SENTINEL_TOKENS, .expires_in_s = 12.25f};
  *recv = (struct llb_kv_recv_request){.req_id = S("d-1"), .local_block_ids = recv_blocks, .num_local_block_ids = 2,
                                       .remote_engine_id = S("prefill-0"), .remote_request_id = S("p-1"),
                                       .remote_first_block = 1, .num_tokens = 48};
  *so = (struct llb_scheduler_output){.step = 3, .block_size = 16,
                                      .kv_connector_metadata = {.reqs_to_recv = recv, .num_reqs_to_recv = 1,
                                                                .reqs_to_send = send, .num_reqs_to_send = 1}};
}

/* Decodes buf and expects MALFORMED with `field` in the message. */
static void expect_so_malformed(const uint8_t *buf, size_t len, const char *field) {
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_scheduler_output out;
  assert_int_equal(llb_scheduler_output_decode(buf, len, &arena, &out), LLB_STATUS_MALFORMED);
  if (!strstr(llb_err_last(), field)) fail_msg("'%s' does not name %s", llb_err_last(), field);
  llb_arena_destroy(&arena);
}

static void test_kv_metadata_round_trips_and_absent_is_empty(void **state) {
  (void)state;
  struct llb_scheduler_output so;
  struct llb_kv_send_request send;
  struct llb_kv_recv_request recv;
  fill_so(&so, &send, &recv);
  struct llb_buf b = {0};
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_OK);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_scheduler_output out;
  assert_int_equal(llb_scheduler_output_decode(b.data, b.len, &arena, &out), LLB_STATUS_OK);
  assert_int_equal(out.kv_connector_metadata.num_reqs_to_send, 1);
  assert_int_equal(out.kv_connector_metadata.reqs_to_send[0].block_ids[1], SENTINEL_BLOCK);
  assert_true(out.kv_connector_metadata.reqs_to_send[0].expires_in_s == 12.25f);
  assert_string_equal(out.kv_connector_metadata.reqs_to_recv[0].remote_engine_id.data, "prefill-0");
  so.kv_connector_metadata = (struct llb_kv_connector_metadata){0};
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_OK);
  assert_int_equal(llb_scheduler_output_decode(b.data, b.len, &arena, &out), LLB_STATUS_OK);
  assert_int_equal(out.kv_connector_metadata.num_reqs_to_send + out.kv_connector_metadata.num_reqs_to_recv, 0);
  llb_arena_destroy(&arena);
  llb_buf_free(&b);
}

static void test_kv_metadata_hostile_values_are_refused_by_the_encoder(void **state) {
  (void)state;
  struct llb_scheduler_output so;
  struct llb_kv_send_request send;
  struct llb_kv_recv_request recv;
  struct llb_buf b = {0};
  const float bad_expiry[] = {NAN, INFINITY, -INFINITY, 0.0f, -1.0f, 3601.0f};
  for (size_t i = 0; i < sizeof bad_expiry / sizeof bad_expiry[0]; i++) {
    fill_so(&so, &send, &recv);
    send.expires_in_s = bad_expiry[i];
    assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(llb_err_last(), "expires_in_s"));
  }
  fill_so(&so, &send, &recv);
  send.num_tokens = 49; /* 4 blocks' worth in 3 blocks */
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
  fill_so(&so, &send, &recv);
  send.num_tokens = -5;
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
  fill_so(&so, &send, &recv);
  int32_t neg[3] = {7, -1, 9};
  send.block_ids = neg;
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "block_ids"));
  fill_so(&so, &send, &recv);
  recv.remote_first_block = -1;
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
  fill_so(&so, &send, &recv);
  recv.remote_first_block = 2; /* 2 + 2 blocks for 48 tokens (3 blocks) */
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
  fill_so(&so, &send, &recv);
  recv.remote_engine_id = S("a.b"); /* not one subject token */
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "remote_engine_id"));
  fill_so(&so, &send, &recv);
  recv.remote_request_id = S("");
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
  fill_so(&so, &send, &recv);
  char long_id[LLB_KV_REQ_ID_MAX + 2];
  memset(long_id, 'x', sizeof long_id - 1);
  long_id[sizeof long_id - 1] = '\0';
  recv.req_id = llb_str_c(long_id);
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_INVALID_ARGUMENT);
  llb_buf_free(&b);
}

static void test_kv_metadata_hostile_values_are_refused_by_the_decoder(void **state) {
  (void)state;
  struct llb_scheduler_output so;
  struct llb_kv_send_request send;
  struct llb_kv_recv_request recv;
  fill_so(&so, &send, &recv);
  struct llb_buf b = {0};
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &b), LLB_STATUS_OK);
  uint8_t *copy = malloc(b.len);
  const int32_t block = SENTINEL_BLOCK, neg = -7, huge = INT32_MIN;
  const int32_t bad_blocks[] = {neg, huge};
  for (int i = 0; i < 2; i++) {
    memcpy(copy, b.data, b.len);
    patch4(copy, b.len, &block, &bad_blocks[i]);
    expect_so_malformed(copy, b.len, "kv_connector_metadata[0].reqs_to_send[0].block_ids");
  }
  const float expiry = 12.25f, bad_expiry[] = {NAN, INFINITY, -2.0f, 1e30f};
  for (int i = 0; i < 4; i++) {
    memcpy(copy, b.data, b.len);
    patch4(copy, b.len, &expiry, &bad_expiry[i]);
    expect_so_malformed(copy, b.len, "expires_in_s");
  }
  const int32_t tokens = SENTINEL_TOKENS, bad_tokens[] = {0, -1, INT32_MAX, 49};
  for (int i = 0; i < 4; i++) {
    memcpy(copy, b.data, b.len);
    patch4(copy, b.len, &tokens, &bad_tokens[i]);
    expect_so_malformed(copy, b.len, "num_tokens");
  }
  free(copy);
  llb_buf_free(&b);
}

static void test_kv_connector_output_round_trips_and_refuses_empty_ids(void **state) {
  (void)state;
  const struct llb_str ids[2] = {S("a-1"), S("b-2")}, bad[1] = {S("")};
  struct llb_model_runner_output m = {.step = 9,
                                      .kv_connector_output = {.finished_sending = ids, .num_finished_sending = 2,
                                                              .failed_recving = ids + 1, .num_failed_recving = 1}};
  struct llb_buf b = {0};
  assert_int_equal(llb_model_runner_output_encode_buf(&m, &b), LLB_STATUS_OK);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_model_runner_output out;
  assert_int_equal(llb_model_runner_output_decode(b.data, b.len, &arena, &out), LLB_STATUS_OK);
  assert_int_equal(out.kv_connector_output.num_finished_sending, 2);
  assert_int_equal(out.kv_connector_output.num_finished_recving, 0);
  assert_string_equal(out.kv_connector_output.failed_recving[0].data, "b-2");
  m.kv_connector_output.finished_recving = bad;
  m.kv_connector_output.num_finished_recving = 1;
  assert_int_equal(llb_model_runner_output_encode_buf(&m, &b), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "finished_recving"));
  llb_arena_destroy(&arena);
  llb_buf_free(&b);
}

/* ---- KVFetchRequest ------------------------------------------------------------------------ */

static void test_fetch_request_hostile_ranges_are_refused_both_ways(void **state) {
  (void)state;
  struct llb_kv_fetch_request f = {.request_id = S("p-1"), .first_block = 0x3A3A, .num_blocks = 0x2B2B};
  struct llb_buf b = {0};
  const int32_t bad[][2] = {{-1, 1}, {0, 0}, {0, -3}, {INT32_MIN, 1}, {0, LLB_KV_MAX_BLOCKS_PER_REQ + 1},
                            {LLB_KV_MAX_BLOCKS_PER_REQ, 1}, {INT32_MAX, INT32_MAX}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct llb_kv_fetch_request g = f;
    g.first_block = bad[i][0];
    g.num_blocks = bad[i][1];
    assert_int_equal(llb_kv_fetch_request_encode_buf(&g, &b), LLB_STATUS_INVALID_ARGUMENT);
  }
  assert_int_equal(llb_kv_fetch_request_encode_buf(&f, &b), LLB_STATUS_OK);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_kv_fetch_request out;
  uint8_t *copy = malloc(b.len);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memcpy(copy, b.data, b.len);
    patch4(copy, b.len, &f.first_block, &bad[i][0]);
    patch4(copy, b.len, &f.num_blocks, &bad[i][1]);
    assert_int_equal(llb_kv_fetch_request_decode(copy, b.len, &arena, &out), LLB_STATUS_MALFORMED);
    assert_non_null(strstr(llb_err_last(), "KVFetchRequest.num_blocks"));
  }
  /* the fetcher's last request says so (the export then ends on the prefill side) */
  assert_int_equal(llb_kv_fetch_request_decode(b.data, b.len, &arena, &out), LLB_STATUS_OK);
  assert_false(out.last);
  f.last = true;
  assert_int_equal(llb_kv_fetch_request_encode_buf(&f, &b), LLB_STATUS_OK);
  assert_int_equal(llb_kv_fetch_request_decode(b.data, b.len, &arena, &out), LLB_STATUS_OK);
  assert_true(out.last);
  assert_int_equal(out.num_blocks, 0x2B2B);
  f.num_blocks = 0; /* a release: no blocks, only with last */
  assert_int_equal(llb_kv_fetch_request_encode_buf(&f, &b), LLB_STATUS_OK);
  assert_int_equal(llb_kv_fetch_request_decode(b.data, b.len, &arena, &out), LLB_STATUS_OK);
  assert_int_equal(out.num_blocks, 0);
  f.last = false;
  assert_int_equal(llb_kv_fetch_request_encode_buf(&f, &b), LLB_STATUS_INVALID_ARGUMENT);
  free(copy);
  llb_arena_destroy(&arena);
  llb_buf_free(&b);
}

/* ---- KVTransferChunk ----------------------------------------------------------------------- */

static uint8_t data[4 * 96];

/* 4 blocks of 96 bytes (2 tokens, 3 layers, 1 KV head, head_dim 4, fp16). */
static struct llb_kv_transfer_chunk sample_chunk(void) {
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 131 + 7);
  return (struct llb_kv_transfer_chunk){.request_id = S("p-1"), .first_block = 1, .num_blocks = 4, .block_size = 2,
                                        .num_layers = 3, .num_kv_heads = 1, .head_dim = 4, .block_bytes = 96,
                                        .num_tokens = 10, .data = data, .data_len = sizeof data};
}

static llb_status decode_chunk(const uint8_t *buf, size_t len, struct llb_kv_transfer_chunk *out) {
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  llb_status st = llb_kv_transfer_chunk_decode(buf, len, &arena, out);
  llb_arena_destroy(&arena);
  return st;
}

static void test_chunk_with_a_flipped_byte_fails_its_checksum(void **state) {
  (void)state;
  struct llb_kv_transfer_chunk c = sample_chunk(), out;
  struct llb_buf b = {0};
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_OK);
  assert_int_equal(decode_chunk(b.data, b.len, &out), LLB_STATUS_OK);
  /* every data byte, and the checksum itself: one flipped bit is caught */
  size_t at = SIZE_MAX;
  for (size_t i = 0; i + sizeof data <= b.len; i++)
    if (memcmp(b.data + i, data, sizeof data) == 0) at = i;
  assert_true(at != SIZE_MAX);
  for (size_t i = 0; i < sizeof data; i += 7) {
    b.data[at + i] ^= 0x10;
    assert_int_equal(decode_chunk(b.data, b.len, &out), LLB_STATUS_MALFORMED);
    assert_non_null(strstr(llb_err_last(), "KVTransferChunk.checksum"));
    b.data[at + i] ^= 0x10;
  }
  /* a header field changed with the data intact: caught too (the checksum covers it) */
  const int32_t tokens = 10, other = 11;
  patch4(b.data, b.len, &tokens, &other);
  assert_int_equal(decode_chunk(b.data, b.len, &out), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "checksum"));
  llb_buf_free(&b);
}

static void test_chunk_geometry_and_size_are_checked_both_ways(void **state) {
  (void)state;
  struct llb_buf b = {0};
  struct llb_kv_transfer_chunk c = sample_chunk(), out;
  c.block_bytes = 95; /* data is not num_blocks * block_bytes */
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_INVALID_ARGUMENT);
  const int32_t bad_geometry[][4] = {{0, 3, 1, 4}, {2, 0, 1, 4}, {2, 3, -1, 4}, {2, 3, 1, 0},
                                     {LLB_KV_MAX_BLOCK_SIZE + 1, 3, 1, 4}, {2, INT32_MAX, 1, 4}};
  for (size_t i = 0; i < sizeof bad_geometry / sizeof bad_geometry[0]; i++) {
    c = sample_chunk();
    c.block_size = bad_geometry[i][0];
    c.num_layers = bad_geometry[i][1];
    c.num_kv_heads = bad_geometry[i][2];
    c.head_dim = bad_geometry[i][3];
    assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_INVALID_ARGUMENT);
  }
  c = sample_chunk();
  c.status = LLB_KV_TRANSFER_NOT_READY; /* an error status with data */
  c.error = (struct llb_error_info){.code = LLB_STATUS_NOT_FOUND, .message = S("not yet")};
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_INVALID_ARGUMENT);
  c = sample_chunk();
  c.status = 9;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_INVALID_ARGUMENT);
  /* oversize: more data than a chunk may carry */
  c = sample_chunk();
  const size_t big = LLB_KV_MAX_CHUNK_DATA_BYTES + 4096;
  uint8_t *huge = calloc(big, 1);
  c.data = huge;
  c.block_bytes = 4096;
  c.num_blocks = (int32_t)(big / 4096);
  c.data_len = big;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "data"));
  free(huge);
  /* decoder: a count or size patched after encoding (the checksum would catch it too; the
   * meaning check comes first and names the field) */
  c = sample_chunk();
  c.num_blocks = 4;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_OK);
  const uint32_t bytes = 96;
  const int32_t bad_bytes[] = {0, 97, -1};
  for (int i = 0; i < 3; i++) {
    uint8_t *copy = malloc(b.len);
    memcpy(copy, b.data, b.len);
    patch4(copy, b.len, &bytes, &bad_bytes[i]);
    assert_int_equal(decode_chunk(copy, b.len, &out), LLB_STATUS_MALFORMED);
    free(copy);
  }
  llb_buf_free(&b);
}

static void test_error_chunk_carries_its_status_and_no_data(void **state) {
  (void)state;
  struct llb_kv_transfer_chunk c = {.request_id = S("p-9"), .first_block = 3, .status = LLB_KV_TRANSFER_EXPIRED,
                                    .error = {.code = LLB_STATUS_NOT_FOUND, .message = S("export p-9 expired")}},
                               out;
  struct llb_buf b = {0};
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_OK);
  assert_int_equal(decode_chunk(b.data, b.len, &out), LLB_STATUS_OK);
  c.error.code = 0; /* an error status needs an error */
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(llb_kv_transfer_status_name(LLB_KV_TRANSFER_EXPIRED), "Expired");
  llb_buf_free(&b);
}

/* The export generation (KVFetchRequest / KVTransferChunk.generation, added at the end of both
 * tables): any 64-bit value round-trips; 0 is written as absent, so a message without the field
 * (a peer older than it) is exactly one with 0 and decodes as 0. */
static void test_generation_round_trips_and_absent_is_zero(void **state) {
  (void)state;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_buf b = {0}, old = {0};
  struct llb_kv_fetch_request f = {.request_id = S("p-1"), .first_block = 2, .num_blocks = 3}, fout;
  assert_int_equal(llb_kv_fetch_request_encode_buf(&f, &old), LLB_STATUS_OK); /* the old layout */
  assert_int_equal(llb_kv_fetch_request_decode(old.data, old.len, &arena, &fout), LLB_STATUS_OK);
  assert_true(fout.generation == 0);
  const uint64_t gens[] = {1, 0x0123456789ABCDEFull, UINT64_MAX};
  for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++) {
    f.generation = gens[i];
    assert_int_equal(llb_kv_fetch_request_encode_buf(&f, &b), LLB_STATUS_OK);
    assert_true(b.len > old.len); /* the field is on the wire only when set */
    assert_int_equal(llb_kv_fetch_request_decode(b.data, b.len, &arena, &fout), LLB_STATUS_OK);
    assert_true(fout.generation == gens[i]);
    assert_int_equal(fout.first_block, 2);
    assert_int_equal(fout.num_blocks, 3);
  }
  const struct llb_kv_fetch_request rel = {.request_id = S("p-1"), .last = true, .generation = 77};
  assert_int_equal(llb_kv_fetch_request_encode_buf(&rel, &b), LLB_STATUS_OK);
  assert_int_equal(llb_kv_fetch_request_decode(b.data, b.len, &arena, &fout), LLB_STATUS_OK);
  assert_true(fout.last && fout.num_blocks == 0 && fout.generation == 77);
  struct llb_kv_transfer_chunk c = sample_chunk(), cout;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &old), LLB_STATUS_OK);
  assert_int_equal(decode_chunk(old.data, old.len, &cout), LLB_STATUS_OK);
  assert_true(cout.generation == 0);
  for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++) {
    c.generation = gens[i];
    assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_OK);
    assert_int_equal(decode_chunk(b.data, b.len, &cout), LLB_STATUS_OK);
    assert_true(cout.generation == gens[i]);
    /* outside the checksum: an old peer computes the same CRC for the same chunk */
    struct llb_kv_transfer_chunk no_gen = c;
    no_gen.generation = 0;
    assert_true(cout.checksum == llb_kv_transfer_chunk_checksum(&no_gen));
  }
  llb_arena_destroy(&arena);
  llb_buf_free(&b);
  llb_buf_free(&old);
}

/* The exporter's incarnation, step count and busy flag (KVTransferChunk.incarnation,
 * worker_steps, worker_busy, at the end of the table): any value round-trips on every status,
 * NotReady too (they describe the worker, not an export); absent (an old peer's chunk) decodes as
 * 0 / false; the incarnation is outside the checksum. */
static void test_incarnation_round_trips_on_every_status_and_absent_is_zero(void **state) {
  (void)state;
  struct llb_buf b = {0}, old = {0};
  struct llb_kv_transfer_chunk c = sample_chunk(), cout;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &old), LLB_STATUS_OK);
  assert_int_equal(decode_chunk(old.data, old.len, &cout), LLB_STATUS_OK);
  assert_true(cout.incarnation == 0);
  c.incarnation = 0xFEDCBA9876543210ull;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &b), LLB_STATUS_OK);
  assert_true(b.len > old.len);
  assert_int_equal(decode_chunk(b.data, b.len, &cout), LLB_STATUS_OK);
  assert_true(cout.incarnation == 0xFEDCBA9876543210ull);
  struct llb_kv_transfer_chunk plain = c;
  plain.incarnation = 0;
  assert_true(cout.checksum == llb_kv_transfer_chunk_checksum(&plain));
  const struct llb_kv_transfer_chunk nr = {.request_id = S("p-2"), .status = LLB_KV_TRANSFER_NOT_READY,
                                           .error = {.code = LLB_STATUS_NOT_FOUND, .message = S("not yet")},
                                           .incarnation = UINT64_MAX, .worker_steps = 0x123456789ull,
                                           .worker_busy = true};
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&nr, &b), LLB_STATUS_OK);
  assert_int_equal(decode_chunk(b.data, b.len, &cout), LLB_STATUS_OK);
  assert_true(cout.status == LLB_KV_TRANSFER_NOT_READY && cout.incarnation == UINT64_MAX && cout.generation == 0);
  assert_true(cout.worker_steps == 0x123456789ull && cout.worker_busy);
  assert_true(old.len > 0);
  assert_int_equal(decode_chunk(old.data, old.len, &cout), LLB_STATUS_OK); /* an older exporter's */
  assert_true(cout.worker_steps == 0 && !cout.worker_busy);
  llb_buf_free(&b);
  llb_buf_free(&old);
}

/* A NotReady chunk says no export was found, so it names no generation: one that does is refused
 * both ways (MALFORMED naming KVTransferChunk.generation); other error statuses may name the
 * export that refused the fetch (a stale generation). The decoder's case: the status byte of an
 * Unknown chunk, found by comparing it with the same chunk as Expired, patched to NotReady. */
static void test_a_not_ready_chunk_naming_a_generation_is_refused_both_ways(void **state) {
  (void)state;
  struct llb_kv_transfer_chunk c = {.request_id = S("p-9"), .status = LLB_KV_TRANSFER_UNKNOWN, .generation = 0x77,
                                    .error = {.code = LLB_STATUS_NOT_FOUND, .message = S("stale")}},
                               out;
  struct llb_buf unknown = {0}, expired = {0};
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &unknown), LLB_STATUS_OK);
  assert_int_equal(decode_chunk(unknown.data, unknown.len, &out), LLB_STATUS_OK);
  assert_true(out.generation == 0x77 && out.status == LLB_KV_TRANSFER_UNKNOWN);
  c.status = LLB_KV_TRANSFER_EXPIRED;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &expired), LLB_STATUS_OK);
  c.status = LLB_KV_TRANSFER_NOT_READY;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &expired), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "KVTransferChunk.generation"));
  c.status = LLB_KV_TRANSFER_EXPIRED;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &expired), LLB_STATUS_OK);
  assert_int_equal(unknown.len, expired.len);
  size_t at = SIZE_MAX;
  for (size_t i = 0; i < unknown.len; i++)
    if (unknown.data[i] == LLB_KV_TRANSFER_UNKNOWN && expired.data[i] == LLB_KV_TRANSFER_EXPIRED) {
      assert_true(at == SIZE_MAX);
      at = i;
    }
  assert_true(at != SIZE_MAX);
  unknown.data[at] = LLB_KV_TRANSFER_NOT_READY;
  assert_int_equal(decode_chunk(unknown.data, unknown.len, &out), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "KVTransferChunk.generation"));
  c.generation = 0; /* NotReady without one: fine */
  c.status = LLB_KV_TRANSFER_NOT_READY;
  assert_int_equal(llb_kv_transfer_chunk_encode_buf(&c, &expired), LLB_STATUS_OK);
  assert_int_equal(decode_chunk(expired.data, expired.len, &out), LLB_STATUS_OK);
  llb_buf_free(&unknown);
  llb_buf_free(&expired);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kv_metadata_round_trips_and_absent_is_empty),
      cmocka_unit_test(test_kv_metadata_hostile_values_are_refused_by_the_encoder),
      cmocka_unit_test(test_kv_metadata_hostile_values_are_refused_by_the_decoder),
      cmocka_unit_test(test_kv_connector_output_round_trips_and_refuses_empty_ids),
      cmocka_unit_test(test_fetch_request_hostile_ranges_are_refused_both_ways),
      cmocka_unit_test(test_chunk_with_a_flipped_byte_fails_its_checksum),
      cmocka_unit_test(test_chunk_geometry_and_size_are_checked_both_ways),
      cmocka_unit_test(test_error_chunk_carries_its_status_and_no_data),
      cmocka_unit_test(test_generation_round_trips_and_absent_is_zero),
      cmocka_unit_test(test_incarnation_round_trips_on_every_status_and_absent_is_zero),
      cmocka_unit_test(test_a_not_ready_chunk_naming_a_generation_is_refused_both_ways),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
