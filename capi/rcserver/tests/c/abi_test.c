/*
 * The C tests of rctb's librcserver.a, compiled against its own header
 * (include/rc_server_abi.h) and linked as versitygw links it:
 *   cc ... -l:librcserver.a -lstdc++ -ldl -lpthread -lm
 * Run with a verbs device: rctb's libibverbs.so.1 on LD_LIBRARY_PATH and
 * RCTB_IBV_ADDR set (tests/run.sh does this), rxe, or a NIC.
 *
 * 1. layout: every struct's size and offsets, and every constant, against
 *    the numbers of versitygw's header on x86_64 (the README's table);
 * 2. rules: each rule of the ABI, one check each, named in the output;
 * 3. load: threads PREPARE, READY (control plane only) and CANCEL at once
 *    with the reaper and short deadlines; every session ends with exactly
 *    one terminal notification and nothing is left.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc_server_abi.h"

static int failures;
static int checks;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		checks++;                                                  \
		if (!(cond)) {                                             \
			failures++;                                        \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);        \
			printf(__VA_ARGS__);                               \
			printf("\n");                                      \
		}                                                          \
	} while (0)

#define EXPECT_RC(call, want)                                              \
	do {                                                               \
		int got_ = (call);                                         \
		CHECK(got_ == (want), "%s = %d, want %s (%d)", #call, got_, \
		      #want, (want));                                      \
	} while (0)

/* ---- 1. layout ---- */

#define SIZE(t, n) CHECK(sizeof(t) == (n), "sizeof(" #t ") = %zu, want %d", sizeof(t), (n))
#define OFF(t, f, n) CHECK(offsetof(t, f) == (n), "offsetof(" #t ", " #f ") = %zu, want %d", offsetof(t, f), (n))

static void layout(void)
{
	SIZE(rc_str_in, 16);
	OFF(rc_str_in, ptr, 0);
	OFF(rc_str_in, len, 8);
	SIZE(rc_device_opts, 72);
	OFF(rc_device_opts, gid_hint, 0);
	OFF(rc_device_opts, port, 8);
	OFF(rc_device_opts, gid_index, 12);
	OFF(rc_device_opts, max_sessions, 16);
	OFF(rc_device_opts, max_user_sessions, 20);
	OFF(rc_device_opts, max_staging_bytes, 24);
	OFF(rc_device_opts, max_user_staging_bytes, 32);
	OFF(rc_device_opts, max_qps, 40);
	OFF(rc_device_opts, max_user_qps, 44);
	OFF(rc_device_opts, t_prep_ms, 48);
	OFF(rc_device_opts, t_exec_ms, 56);
	OFF(rc_device_opts, max_ready_slots, 64);
	OFF(rc_device_opts, max_stage_slots, 68);
	SIZE(rc_principal_id, 32);
	SIZE(rc_handle, 16);
	OFF(rc_handle, session_epoch, 0);
	OFF(rc_handle, nonce, 8);
	SIZE(rc_prepare_req, 96);
	OFF(rc_prepare_req, principal, 0);
	OFF(rc_prepare_req, op, 32);
	OFF(rc_prepare_req, target, 40);
	OFF(rc_prepare_req, offset, 56);
	OFF(rc_prepare_req, size, 64);
	OFF(rc_prepare_req, client_psn, 72);
	OFF(rc_prepare_req, cookie, 76);
	OFF(rc_prepare_req, client_token, 80);
	SIZE(rc_prepare_resp, 152);
	OFF(rc_prepare_resp, session_id, 0);
	OFF(rc_prepare_resp, session_len, 36);
	OFF(rc_prepare_resp, server_qpn, 40);
	OFF(rc_prepare_resp, server_psn, 44);
	OFF(rc_prepare_resp, staging_addr, 48);
	OFF(rc_prepare_resp, staging_rkey, 56);
	OFF(rc_prepare_resp, reply_token, 60);
	OFF(rc_prepare_resp, reply_len, 148);
	SIZE(rc_staging_lease, 32);
	OFF(rc_staging_lease, buf, 0);
	OFF(rc_staging_lease, capacity, 8);
	OFF(rc_staging_lease, handle, 16);
	SIZE(rc_put_view, 32);
	OFF(rc_put_view, handle, 0);
	OFF(rc_put_view, buf, 16);
	OFF(rc_put_view, len, 24);
	SIZE(rc_ready_req, 72);
	OFF(rc_ready_req, principal, 0);
	OFF(rc_ready_req, session_id, 32);
	OFF(rc_ready_req, cookie, 48);
	OFF(rc_ready_req, client_qpn, 52);
	OFF(rc_ready_req, client_mr_addr, 56);
	OFF(rc_ready_req, client_mr_rkey, 64);
	SIZE(rc_ready_resp, 280);
	OFF(rc_ready_resp, bytes_transferred, 0);
	OFF(rc_ready_resp, cookie_echo, 8);
	OFF(rc_ready_resp, outcome, 12);
	OFF(rc_ready_resp, etag, 16);
	OFF(rc_ready_resp, etag_len, 144);
	OFF(rc_ready_resp, version_id, 148);
	OFF(rc_ready_resp, version_len, 276);
	SIZE(rc_session_info_resp, 2056);
	OFF(rc_session_info_resp, target_len, 2048);
	OFF(rc_session_info_resp, op, 2052);
	SIZE(rc_session_snapshot, 2112);
	OFF(rc_session_snapshot, op, 33);
	OFF(rc_session_snapshot, target, 37);
	OFF(rc_session_snapshot, target_len, 2088);
	OFF(rc_session_snapshot, state, 2092);
	OFF(rc_session_snapshot, age_ms, 2096);
	OFF(rc_session_snapshot, staging_bytes, 2104);
	int codes[] = {RC_OK, RC_E_ARG, RC_E_STATE, RC_E_SESSION, RC_E_STALE, RC_E_NO_SESSION, RC_E_DOUBLE,
		       RC_E_WIRE, RC_E_SHORT, RC_E_TRUNC, RC_E_LIMIT, RC_E_INTERNAL};
	for (int i = 0; i < 12; i++)
		CHECK(codes[i] == i, "status code %d is %d", i, codes[i]);
	int outcomes[] = {RC_READY_OK, RC_READY_BUSY, RC_READY_TIMEOUT, RC_READY_VERIFY_FAIL, RC_READY_WIRE_FAIL};
	for (int i = 0; i < 5; i++)
		CHECK(outcomes[i] == i, "ready outcome %d is %d", i, outcomes[i]);
	CHECK(RC_SNAPSHOT_REAP_PENDING == 0x80, "RC_SNAPSHOT_REAP_PENDING");
}

/* ---- hooks ---- */

#define MAX_ENDED 4096

struct record {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	int ended;
	char ids[MAX_ENDED][33];
	int outcomes[MAX_ENDED];
	uint64_t bytes[MAX_ENDED];
	int logs;
	int errors;
	rc_server *srv; /* the hooks call into it: proof that no lock is held */
};

static struct record rec = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};

static void on_terminal(void *ctx, const char *id, int outcome, uint64_t bytes)
{
	struct record *r = ctx;
	/* A server lock held here would deadlock this call (run.sh has a timeout). */
	if (r->srv && rc_try_acquire_stage(r->srv) == RC_OK)
		rc_release_stage(r->srv);
	pthread_mutex_lock(&r->lock);
	if (r->ended < MAX_ENDED) {
		snprintf(r->ids[r->ended], 33, "%s", id);
		r->outcomes[r->ended] = outcome;
		r->bytes[r->ended] = bytes;
	}
	r->ended++;
	pthread_cond_broadcast(&r->changed);
	pthread_mutex_unlock(&r->lock);
}

static void on_log(void *ctx, int level, const char *msg, const char *file, int line)
{
	struct record *r = ctx;
	(void)msg;
	if (r->srv && rc_try_acquire_ready(r->srv) == RC_OK)
		rc_release_ready(r->srv);
	pthread_mutex_lock(&r->lock);
	r->logs++;
	if (level == 0)
		r->errors++;
	pthread_mutex_unlock(&r->lock);
	(void)file;
	(void)line;
}

/* How often `id` ended so far. */
static int ended_count(const char *id)
{
	int n = 0;
	pthread_mutex_lock(&rec.lock);
	for (int i = 0; i < rec.ended && i < MAX_ENDED; i++)
		n += strcmp(rec.ids[i], id) == 0;
	pthread_mutex_unlock(&rec.lock);
	return n;
}

static int last_outcome(const char *id)
{
	int o = -1;
	pthread_mutex_lock(&rec.lock);
	for (int i = 0; i < rec.ended && i < MAX_ENDED; i++)
		if (strcmp(rec.ids[i], id) == 0)
			o = rec.outcomes[i];
	pthread_mutex_unlock(&rec.lock);
	return o;
}

static void wait_ended(const char *id)
{
	pthread_mutex_lock(&rec.lock);
	for (;;) {
		int seen = 0;
		for (int i = 0; i < rec.ended && i < MAX_ENDED; i++)
			seen |= strcmp(rec.ids[i], id) == 0;
		if (seen)
			break;
		pthread_cond_wait(&rec.changed, &rec.lock);
	}
	pthread_mutex_unlock(&rec.lock);
}

/* ---- helpers ---- */

static rc_str_in str(const char *s)
{
	rc_str_in r = {s, s ? (uint32_t)strlen(s) : 0};
	return r;
}

static rc_principal_id principal(uint8_t tag)
{
	rc_principal_id p;
	memset(p.id, tag, sizeof p.id);
	return p;
}

static rc_device_opts opts_default(void)
{
	rc_device_opts o;
	memset(&o, 0, sizeof o);
	o.gid_index = -1;
	o.max_sessions = 1024;
	o.max_user_sessions = 1024;
	o.max_staging_bytes = 1 << 30;
	o.max_user_staging_bytes = 1 << 30;
	o.max_qps = 1024;
	o.max_user_qps = 0;
	o.t_prep_ms = 30000;
	o.t_exec_ms = 30000;
	return o;
}

static rc_server *open_server(rc_device_opts o)
{
	rc_server *srv = NULL;
	int rc = rc_server_init(&o, &srv);
	CHECK(rc == RC_OK && srv, "rc_server_init = %d", rc);
	if (!srv) {
		printf("cannot go on without a server\n");
		exit(1);
	}
	rc_server_set_terminal_notify(srv, on_terminal, &rec);
	rc_server_set_log_sink(srv, on_log, &rec);
	return srv;
}

static rc_prepare_req prepare_req(uint8_t op, uint8_t who, uint64_t size, const char *target)
{
	rc_prepare_req r;
	memset(&r, 0, sizeof r);
	r.principal = principal(who);
	r.op = op;
	r.target = str(target);
	r.size = size;
	r.client_psn = 0x1234;
	r.cookie = 0xC0FFEE;
	return r;
}

/* PREPAREs and returns the session id (into id[33]), or the status. */
static int prepare(rc_server *srv, uint8_t op, uint8_t who, uint64_t size, char *id)
{
	rc_prepare_req r = prepare_req(op, who, size, "/bucket/key");
	rc_prepare_resp resp;
	int rc = rc_prepare(srv, &r, &resp);
	if (rc == RC_OK)
		memcpy(id, resp.session_id, 33);
	return rc;
}

static rc_ready_req ready_req(uint8_t who, const char *id, uint32_t qpn)
{
	rc_ready_req r;
	memset(&r, 0, sizeof r);
	r.principal = principal(who);
	r.session_id = str(id);
	r.cookie = 0xC0FFEE;
	r.client_qpn = qpn;
	return r;
}

struct count {
	int n;
	int reaping;
	char target[64];
};

static void on_snapshot(const rc_session_snapshot *s, void *ctx)
{
	struct count *c = ctx;
	c->n++;
	c->reaping += (s->state & RC_SNAPSHOT_REAP_PENDING) != 0;
	snprintf(c->target, sizeof c->target, "%.*s", (int)s->target_len, s->target);
}

static int live(rc_server *srv)
{
	struct count c = {0};
	EXPECT_RC(rc_server_sessions_snapshot(srv, on_snapshot, &c), RC_OK);
	return c.n;
}

/* ---- 2. rules ---- */

static void arguments_first(void)
{
	rc_prepare_req r = prepare_req(2, 1, 10, "/b/k");
	rc_prepare_resp resp;
	/* versitygw's own test: op > 1 is ARG even with a bogus server. */
	EXPECT_RC(rc_prepare((rc_server *)(uintptr_t)0x10, &r, &resp), RC_E_ARG);
	EXPECT_RC(rc_prepare(NULL, NULL, &resp), RC_E_ARG);
	r.op = 0;
	EXPECT_RC(rc_prepare(NULL, &r, NULL), RC_E_ARG);
	EXPECT_RC(rc_prepare(NULL, &r, &resp), RC_E_ARG);
	rc_str_in bad = {NULL, 5};
	r.target = bad;
	EXPECT_RC(rc_prepare((rc_server *)(uintptr_t)0x10, &r, &resp), RC_E_ARG);
	EXPECT_RC(rc_server_init(NULL, NULL), RC_E_ARG);
	rc_device_opts o = opts_default();
	EXPECT_RC(rc_server_init(&o, NULL), RC_E_ARG);
	rc_server *srv = NULL;
	o.gid_hint = "not a gid";
	EXPECT_RC(rc_server_init(&o, &srv), RC_E_ARG);
	o.gid_hint = "10.254.254.254";
	EXPECT_RC(rc_server_init(&o, &srv), RC_E_INTERNAL);
	CHECK(srv == NULL, "no server after a failed init");
	EXPECT_RC(rc_finish_prepare(NULL, str("x"), 1), RC_E_ARG);
	EXPECT_RC(rc_borrow_staging(NULL, str("x"), NULL), RC_E_ARG);
	EXPECT_RC(rc_ready_transfer(NULL, NULL, NULL), RC_E_ARG);
	EXPECT_RC(rc_get_put_data(NULL, str("x"), NULL), RC_E_ARG);
	EXPECT_RC(rc_server_sessions_snapshot(NULL, on_snapshot, NULL), RC_E_ARG);
	EXPECT_RC(rc_try_acquire_ready(NULL), RC_E_ARG);
	rc_server_destroy(NULL);
	rc_cancel_all(NULL);
	rc_release_stage(NULL);
}

static void limits(void)
{
	char id[33];
	rc_device_opts o;
	rc_server *srv;
	/* Each maximum at 0 refuses every PREPARE (max_user_qps aside). */
	for (int field = 0; field < 5; field++) {
		o = opts_default();
		switch (field) {
		case 0: o.max_sessions = 0; break;
		case 1: o.max_user_sessions = 0; break;
		case 2: o.max_staging_bytes = 0; break;
		case 3: o.max_user_staging_bytes = 0; break;
		default: o.max_qps = 0; break;
		}
		srv = open_server(o);
		int rc = prepare(srv, 1, 1, 10, id);
		CHECK(rc == RC_E_LIMIT, "a zero maximum (field %d) lets PREPARE through: %d", field, rc);
		rc_server_destroy(srv);
	}
	/* max_user_qps 0 is no limit; max_qps 2 is two sessions. */
	o = opts_default();
	o.max_qps = 2;
	o.max_user_qps = 0;
	srv = open_server(o);
	char a[33], b[33];
	EXPECT_RC(prepare(srv, 1, 1, 10, a), RC_OK);
	EXPECT_RC(prepare(srv, 1, 1, 10, b), RC_OK);
	EXPECT_RC(prepare(srv, 1, 1, 10, id), RC_E_LIMIT);
	EXPECT_RC(rc_cancel(srv, str(a), principal(1)), RC_OK);
	EXPECT_RC(prepare(srv, 1, 1, 10, id), RC_OK);
	rc_server_destroy(srv);
	/* Slots: one READY slot, taken outside READY, is the one READY needs. */
	o = opts_default();
	o.max_ready_slots = 1;
	o.max_stage_slots = 1;
	srv = open_server(o);
	EXPECT_RC(rc_try_acquire_stage(srv), RC_OK);
	EXPECT_RC(rc_try_acquire_stage(srv), RC_E_LIMIT);
	rc_release_stage(srv);
	EXPECT_RC(rc_try_acquire_stage(srv), RC_OK);
	rc_release_stage(srv);
	EXPECT_RC(prepare(srv, 1, 1, 10, id), RC_OK);
	EXPECT_RC(rc_finish_prepare(srv, str(id), 1), RC_OK);
	EXPECT_RC(rc_try_acquire_ready(srv), RC_OK);
	rc_ready_req rr = ready_req(1, id, 0);
	rc_ready_resp resp;
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_E_LIMIT);
	rc_release_ready(srv);
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_OK);
	rc_server_destroy(srv);
}

static void strings(rc_server *srv)
{
	char id[33];
	static char big[2049];
	memset(big, 'k', 2048);
	rc_prepare_req r = prepare_req(0, 1, 10, big);
	rc_prepare_resp resp;
	EXPECT_RC(rc_prepare(srv, &r, &resp), RC_E_TRUNC);
	r.target.len = 2047;
	EXPECT_RC(rc_prepare(srv, &r, &resp), RC_OK);
	CHECK(resp.session_len == 32 && strlen(resp.session_id) == 32, "a session id is 32 characters");
	for (int i = 0; i < 32; i++)
		CHECK((resp.session_id[i] >= '0' && resp.session_id[i] <= '9') ||
			      (resp.session_id[i] >= 'a' && resp.session_id[i] <= 'f'),
		      "session id character %d is lowercase hex: %c", i, resp.session_id[i]);
	CHECK(resp.reply_len == 88, "reply token is 88 characters: %u", resp.reply_len);
	CHECK(resp.server_psn == (resp.server_qpn & 0xffffff), "server PSN is its QPN");
	rc_session_info_resp info;
	EXPECT_RC(rc_session_info(srv, str(resp.session_id), principal(1), &info), RC_OK);
	CHECK(info.target_len == 2047 && info.op == 0, "session info: %u bytes, op %d", info.target_len, info.op);
	EXPECT_RC(rc_session_info(srv, str(resp.session_id), principal(2), &info), RC_E_SESSION);
	EXPECT_RC(rc_session_info(srv, str("0123456789abcdef0123456789ABCDEF"), principal(1), &info),
		  RC_E_NO_SESSION);
	EXPECT_RC(rc_session_info(srv, str("short"), principal(1), &info), RC_E_NO_SESSION);
	/* An etag of 128 bytes is TRUNC, and the session is reaped. */
	rc_staging_lease lease;
	EXPECT_RC(rc_borrow_staging(srv, str(resp.session_id), &lease), RC_OK);
	EXPECT_RC(rc_finish_staging(srv, lease, 1, 10, str(big + 1920), str("")), RC_E_TRUNC);
	EXPECT_RC(rc_finish_prepare(srv, str(resp.session_id), 1), RC_E_NO_SESSION);
	CHECK(ended_count(resp.session_id) == 1, "the reaped session ended once");
	/* A bad token is ARG. */
	EXPECT_RC(prepare(srv, 1, 1, 10, id), RC_OK);
	r = prepare_req(1, 1, 10, "/b/k");
	r.client_token = str("1234");
	EXPECT_RC(rc_prepare(srv, &r, &resp), RC_E_ARG);
	r = prepare_req(1, 1, 0, "/b/k");
	EXPECT_RC(rc_prepare(srv, &r, &resp), RC_E_ARG);
	r = prepare_req(1, 1, 0x80000000ull, "/b/k");
	EXPECT_RC(rc_prepare(srv, &r, &resp), RC_E_ARG);
	EXPECT_RC(rc_cancel(srv, str(id), principal(1)), RC_OK);
	EXPECT_RC(rc_cancel(srv, str(id), principal(1)), RC_E_NO_SESSION);
}

static void leases_are_consume_once(rc_server *srv)
{
	char id[33];
	EXPECT_RC(prepare(srv, 0, 1, 100, id), RC_OK);
	rc_staging_lease lease, again;
	EXPECT_RC(rc_borrow_staging(srv, str(id), &lease), RC_OK);
	CHECK(lease.buf != NULL && lease.capacity == 100 && lease.handle.nonce != 0, "the lease lends the buffer");
	EXPECT_RC(rc_borrow_staging(srv, str(id), &again), RC_E_DOUBLE);
	memset(lease.buf, 0x5a, lease.capacity);
	rc_staging_lease forged = lease;
	forged.handle.nonce = 0;
	EXPECT_RC(rc_finish_staging(srv, forged, 1, 100, str("e"), str("v")), RC_E_STALE);
	forged.handle.nonce = lease.handle.nonce + 1;
	EXPECT_RC(rc_finish_staging(srv, forged, 1, 100, str("e"), str("v")), RC_E_STALE);
	/* Matched by the handle alone: versitygw passes no buffer back. */
	rc_staging_lease by_handle = {NULL, 0, lease.handle};
	EXPECT_RC(rc_finish_staging(srv, by_handle, 1, 100, str("etag-1"), str("v1")), RC_OK);
	EXPECT_RC(rc_finish_staging(srv, by_handle, 1, 100, str("etag-1"), str("v1")), RC_E_STALE);
	EXPECT_RC(rc_borrow_staging(srv, str(id), &again), RC_OK);
	EXPECT_RC(rc_finish_staging(srv, again, 1, 99, str(""), str("")), RC_E_SHORT);
	EXPECT_RC(rc_borrow_staging(srv, str(id), &again), RC_E_NO_SESSION);
	CHECK(ended_count(id) == 1, "a SHORT staging reaps the session once");
}

static void ready_rules(rc_server *srv)
{
	char id[33];
	rc_ready_resp resp;
	memset(&resp, 0, sizeof resp);
	/* PUT, control plane only (client QPN 0): no data moves. */
	EXPECT_RC(prepare(srv, 1, 1, 4096, id), RC_OK);
	rc_ready_req rr = ready_req(1, id, 0);
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_E_STATE);
	EXPECT_RC(rc_finish_prepare(srv, str(id), 1), RC_OK);
	EXPECT_RC(rc_finish_prepare(srv, str(id), 1), RC_OK);
	rr = ready_req(2, id, 0);
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_E_SESSION);
	rr = ready_req(1, id, 0);
	rr.cookie = 1;
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_E_SESSION);
	rr = ready_req(1, id, 0);
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_OK);
	CHECK(resp.outcome == RC_READY_OK && resp.bytes_transferred == 4096 && resp.cookie_echo == 0xC0FFEE,
	      "READY: outcome %d, %llu bytes, cookie %x", resp.outcome, (unsigned long long)resp.bytes_transferred,
	      resp.cookie_echo);
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_E_STATE);
	rc_put_view view, again;
	EXPECT_RC(rc_get_put_data(srv, str(id), &view), RC_OK);
	CHECK(view.buf != NULL && view.len == 4096 && view.handle.nonce != 0, "the view lends the data");
	EXPECT_RC(rc_get_put_data(srv, str(id), &again), RC_E_DOUBLE);
	CHECK(ended_count(id) == 0, "not ended while the view is out");
	EXPECT_RC(rc_finish_put(srv, view, 1, str("etag"), str("")), RC_OK);
	EXPECT_RC(rc_finish_put(srv, view, 1, str("etag"), str("")), RC_E_STALE);
	CHECK(ended_count(id) == 1 && last_outcome(id) == RC_READY_OK, "the PUT ended once, OK");
	/* A GET whose client QP does not exist: the data phase passes its
	 * deadline; READY is WIRE and the outcome reaches the notification. */
	EXPECT_RC(prepare(srv, 0, 1, 64, id), RC_OK);
	rc_staging_lease lease;
	EXPECT_RC(rc_borrow_staging(srv, str(id), &lease), RC_OK);
	EXPECT_RC(rc_finish_staging(srv, lease, 1, 64, str("e"), str("")), RC_OK);
	EXPECT_RC(rc_finish_prepare(srv, str(id), 1), RC_OK);
	rr = ready_req(1, id, 0xABCDE);
	memset(&resp, 0x77, sizeof resp);
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_E_WIRE);
	CHECK(resp.bytes_transferred == 0x7777777777777777ull, "a failed READY leaves resp alone");
	wait_ended(id);
	CHECK(ended_count(id) == 1, "the failed GET ended once");
	CHECK(last_outcome(id) == RC_READY_TIMEOUT, "its outcome is TIMEOUT: %d", last_outcome(id));
	/* finish_final on a GET; cancel by another principal. */
	EXPECT_RC(prepare(srv, 0, 1, 8, id), RC_OK);
	EXPECT_RC(rc_cancel(srv, str(id), principal(2)), RC_E_SESSION);
	EXPECT_RC(rc_borrow_staging(srv, str(id), &lease), RC_OK);
	EXPECT_RC(rc_finish_staging(srv, lease, 1, 8, str(""), str("")), RC_OK);
	EXPECT_RC(rc_finish_prepare(srv, str(id), 1), RC_OK);
	rr = ready_req(1, id, 0);
	EXPECT_RC(rc_ready_transfer(srv, &rr, &resp), RC_OK);
	EXPECT_RC(rc_finish_final(srv, str(id)), RC_OK);
	EXPECT_RC(rc_finish_final(srv, str(id)), RC_E_NO_SESSION);
	CHECK(ended_count(id) == 1, "the GET ended once");
}

static void snapshot_and_cancel_all(rc_server *srv)
{
	char a[33], b[33];
	EXPECT_RC(prepare(srv, 1, 1, 10, a), RC_OK);
	EXPECT_RC(prepare(srv, 0, 3, 20, b), RC_OK);
	rc_staging_lease lease;
	EXPECT_RC(rc_borrow_staging(srv, str(b), &lease), RC_OK);
	struct count c = {0};
	EXPECT_RC(rc_server_sessions_snapshot(srv, on_snapshot, &c), RC_OK);
	CHECK(c.n == 2 && c.reaping == 0 && strcmp(c.target, "/bucket/key") == 0, "snapshot: %d live", c.n);
	rc_cancel_all(srv);
	memset(&c, 0, sizeof c);
	EXPECT_RC(rc_server_sessions_snapshot(srv, on_snapshot, &c), RC_OK);
	CHECK(c.n == 1 && c.reaping == 1, "after cancel_all only the leased one is left, reap pending");
	CHECK(ended_count(a) == 1 && ended_count(b) == 0, "the unleased one ended");
	EXPECT_RC(rc_finish_staging(srv, lease, 1, 20, str(""), str("")), RC_OK);
	CHECK(live(srv) == 0 && ended_count(b) == 1, "the lease's return ended it");
}

struct destroyer {
	rc_server *srv;
	atomic_int returned;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;
	rc_server_destroy(d->srv);
	atomic_store(&d->returned, 1);
	return NULL;
}

struct inflight {
	rc_server *srv;
	char id[33];
	atomic_int returned;
	int rc;
};

static void *ready_elsewhere(void *arg)
{
	struct inflight *f = arg;
	rc_ready_req rr = ready_req(1, f->id, 0xABCDE);
	rc_ready_resp resp;
	f->rc = rc_ready_transfer(f->srv, &rr, &resp);
	atomic_store(&f->returned, 1);
	return NULL;
}

struct state_seen {
	int transferring;
};

static void on_state(const rc_session_snapshot *s, void *ctx)
{
	struct state_seen *st = ctx;
	st->transferring |= (s->state & 0x7f) == 2;
}

/* Destroy waits for a call in progress: a READY whose data phase runs (to
 * a QP that does not exist) when destroy begins. Destroy cancels it, and
 * returns only after the call let go of the server, its hooks included:
 * the READY's error line has reached the log sink by then. (When the
 * caller's thread gets to run again after the call is its scheduler's
 * business, so the test does not look at that.) */
static void destroy_waits_for_calls(void)
{
	rc_device_opts o = opts_default();
	o.t_exec_ms = 60000; /* only destroy ends this data phase */
	rc_server *srv = open_server(o);
	struct inflight f = {.srv = srv};
	EXPECT_RC(prepare(srv, 1, 1, 16, f.id), RC_OK);
	EXPECT_RC(rc_finish_prepare(srv, str(f.id), 1), RC_OK);
	rec.srv = NULL;
	pthread_mutex_lock(&rec.lock);
	int errors_before = rec.errors;
	pthread_mutex_unlock(&rec.lock);
	pthread_t t;
	pthread_create(&t, NULL, ready_elsewhere, &f);
	struct state_seen st = {0};
	while (!st.transferring && !atomic_load(&f.returned))
		rc_server_sessions_snapshot(srv, on_state, &st);
	CHECK(st.transferring, "the READY was seen transferring before it returned");
	rc_server_destroy(srv);
	pthread_mutex_lock(&rec.lock);
	int errors_after = rec.errors;
	pthread_mutex_unlock(&rec.lock);
	CHECK(errors_after == errors_before + 1, "destroy returned before the READY in progress was done: %d error lines",
	      errors_after - errors_before);
	pthread_join(t, NULL);
	CHECK(f.rc == RC_E_WIRE, "the READY in progress ended as WIRE: %d", f.rc);
	/* Destroy cancelled its data phase (the QP is stopped): WIRE_FAIL. */
	CHECK(ended_count(f.id) == 1 && last_outcome(f.id) == RC_READY_WIRE_FAIL, "it ended once, WIRE_FAIL: %d",
	      last_outcome(f.id));
}

static void destroy_waits_for_leases(void)
{
	rc_server *srv = open_server(opts_default());
	char leased[33], plain[33];
	EXPECT_RC(prepare(srv, 0, 1, 16, leased), RC_OK);
	EXPECT_RC(prepare(srv, 1, 1, 16, plain), RC_OK);
	rc_staging_lease lease;
	EXPECT_RC(rc_borrow_staging(srv, str(leased), &lease), RC_OK);
	rec.srv = NULL; /* the hooks must not call into a server being destroyed */
	struct destroyer d = {srv, 0};
	pthread_t t;
	pthread_create(&t, NULL, destroy_thread, &d);
	wait_ended(plain); /* destroy is under way: it cancelled everything */
	CHECK(atomic_load(&d.returned) == 0, "destroy returned with a lease out");
	char id[33];
	EXPECT_RC(prepare(srv, 1, 1, 16, id), RC_E_INTERNAL);
	EXPECT_RC(rc_finish_staging(srv, lease, 1, 16, str(""), str("")), RC_OK);
	pthread_join(t, NULL);
	CHECK(ended_count(leased) == 1 && ended_count(plain) == 1, "both ended once");
}

/* ---- 3. load ---- */

#define THREADS 8
#define ROUNDS 200

static atomic_int made;

/* A session the reaper may have taken (its 20 ms prepare deadline passed,
 * which on a slow machine happens between two calls): the call says so
 * with NO_SESSION or STALE, and the round moves on. */
static int gone(int rc)
{
	return rc == RC_E_NO_SESSION || rc == RC_E_STALE;
}

static atomic_int expired;

#define STEP(call)                                                              \
	do {                                                                    \
		int rc_ = (call);                                               \
		if (gone(rc_)) {                                                \
			atomic_fetch_add(&expired, 1);                          \
			goto next;                                              \
		}                                                               \
		CHECK(rc_ == RC_OK, "load: %s = %d", #call, rc_);              \
		if (rc_ != RC_OK)                                               \
			goto next;                                              \
	} while (0)

static void *worker(void *arg)
{
	rc_server *srv = arg;
	for (int i = 0; i < ROUNDS; i++) {
		char id[33];
		uint8_t who = (uint8_t)(i % 4);
		int rc = prepare(srv, (uint8_t)(i % 2), who, 1 + (uint64_t)i * 7, id);
		if (rc == RC_E_LIMIT)
			continue;
		CHECK(rc == RC_OK, "load: prepare = %d", rc);
		if (rc != RC_OK)
			continue;
		atomic_fetch_add(&made, 1);
		if (i % 5 == 0)
			continue; /* abandoned: the reaper's prepare deadline takes it */
		if (i % 7 == 0) {
			rc = rc_cancel(srv, str(id), principal(who));
			CHECK(rc == RC_OK || rc == RC_E_NO_SESSION, "load: cancel = %d", rc);
			continue;
		}
		if (i % 2 == 0) {
			rc_staging_lease lease;
			STEP(rc_borrow_staging(srv, str(id), &lease));
			memset(lease.buf, i, lease.capacity);
			STEP(rc_finish_staging(srv, lease, 1, lease.capacity, str("e"), str("")));
		}
		STEP(rc_finish_prepare(srv, str(id), 1));
		rc_ready_req rr = ready_req(who, id, 0);
		rc_ready_resp resp;
		rc = rc_ready_transfer(srv, &rr, &resp);
		if (rc == RC_E_LIMIT) {
			rc = rc_cancel(srv, str(id), principal(who));
			CHECK(rc == RC_OK || rc == RC_E_NO_SESSION, "load: cancel = %d", rc);
			continue;
		}
		STEP(rc);
		if (i % 2 == 0) {
			STEP(rc_finish_final(srv, str(id)));
		} else {
			rc_put_view view;
			STEP(rc_get_put_data(srv, str(id), &view));
			STEP(rc_finish_put(srv, view, 1, str("e"), str("")));
		}
	next:;
	}
	return NULL;
}

static void load(void)
{
	rc_device_opts o = opts_default();
	o.t_prep_ms = 20;
	o.max_ready_slots = 4;
	o.max_sessions = 64;
	rc_server *srv = open_server(o);
	pthread_mutex_lock(&rec.lock);
	int before = rec.ended;
	pthread_mutex_unlock(&rec.lock);
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, srv);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	rc_server_destroy(srv);
	pthread_mutex_lock(&rec.lock);
	int ended = rec.ended - before;
	pthread_mutex_unlock(&rec.lock);
	CHECK(ended == atomic_load(&made), "load: %d sessions made, %d terminal notifications", atomic_load(&made),
	      ended);
	/* Each id at most once among this run's records. */
	int dup = 0;
	pthread_mutex_lock(&rec.lock);
	for (int i = before; i < rec.ended && i < MAX_ENDED; i++)
		for (int j = before; j < i; j++)
			dup += strcmp(rec.ids[i], rec.ids[j]) == 0;
	pthread_mutex_unlock(&rec.lock);
	CHECK(dup == 0, "load: %d sessions notified twice", dup);
	printf("load: %d threads x %d rounds, %d sessions, %d notifications, %d found expired\n", THREADS, ROUNDS,
	       atomic_load(&made), ended, atomic_load(&expired));
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	layout();
	printf("layout: %d checks\n", checks);
	arguments_first();
	limits();
	/* A data phase ends at 100 ms: the failed GET of ready_rules times out
	 * long before its QP's retries (7 x ~67 ms) would give up. */
	rc_device_opts o = opts_default();
	o.t_exec_ms = 100;
	rc_server *srv = open_server(o);
	rec.srv = srv;
	strings(srv);
	leases_are_consume_once(srv);
	ready_rules(srv);
	snapshot_and_cancel_all(srv);
	rec.srv = NULL;
	rc_server_destroy(srv);
	destroy_waits_for_leases();
	destroy_waits_for_calls();
	CHECK(rec.logs > 0 && rec.errors > 0, "the log sink heard %d lines, %d errors", rec.logs, rec.errors);
	load();
	printf("%d checks, %d failed\n", checks, failures);
	return failures != 0;
}
