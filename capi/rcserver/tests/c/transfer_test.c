/*
 * A whole GET and a whole PUT through librcserver.a's C ABI, with rctb's
 * own hipobj client on the other side of a real RC connection: the client
 * is examples/rc_client.rs (RcClient on a rctb-udp endpoint), a child
 * process this program talks to over pipes; the server runs on a device of
 * the libibverbs the process loads (tests/run.sh: rctb's libibverbs.so.1).
 *
 *   transfer_test RC_CLIENT CLIENT_ENDPOINT [GID_HINT]
 *
 * For each size, a GET (the object staged through a lease, moved by the
 * server's RDMA WRITE with immediate into the client's memory, its FNV-1a
 * reported back by the client) and a PUT (the client's WRITE into the
 * staging region, read back through the PUT view). Every session ends with
 * one terminal notification, outcome OK and its size in bytes.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rc_server_abi.h"

static int failures, checks;

#define CHECK(cond, ...)                                            \
	do {                                                        \
		checks++;                                           \
		if (!(cond)) {                                      \
			failures++;                                 \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);                        \
			printf("\n");                               \
		}                                                   \
	} while (0)

static FILE *to_client, *from_client;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ended, ended_ok;
static uint64_t ended_bytes;

static void on_terminal(void *ctx, const char *id, int outcome, uint64_t bytes)
{
	(void)ctx;
	(void)id;
	pthread_mutex_lock(&lock);
	ended++;
	ended_ok += outcome == RC_READY_OK;
	ended_bytes += bytes;
	pthread_mutex_unlock(&lock);
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static void pattern(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((uint8_t)i * 31 + seed);
}

static rc_str_in str(const char *s)
{
	rc_str_in r = {s, (uint32_t)strlen(s)};
	return r;
}

static int hexbyte(const char *p)
{
	unsigned v;
	return sscanf(p, "%2x", &v) == 1 ? (int)v : -1;
}

static char *line(char *buf, size_t n, const char *want)
{
	if (!fgets(buf, (int)n, from_client)) {
		printf("FAIL the client closed its output, expecting '%s'\n", want);
		exit(1);
	}
	if (strncmp(buf, want, strlen(want)) != 0) {
		printf("FAIL expected '%s' from the client, got: %s", want, buf);
		exit(1);
	}
	return buf;
}

struct ready {
	rc_server *srv;
	rc_ready_req req;
	rc_ready_resp resp;
	int rc;
};

static void *ready_thread(void *arg)
{
	struct ready *r = arg;
	r->rc = rc_ready_transfer(r->srv, &r->req, &r->resp);
	return NULL;
}

/* One transfer: op 0 GET, 1 PUT. */
static void transfer(rc_server *srv, int op, size_t size, uint8_t seed)
{
	char buf[512], principal[65], token[200], sid[33];
	fprintf(to_client, "%s %zu %u\n", op ? "put" : "get", size, seed);
	fflush(to_client);
	line(buf, sizeof buf, "prepare ");
	unsigned wop, psn, cookie;
	unsigned long long wsize;
	if (sscanf(buf, "prepare %u %64s %llu %u %u %199s", &wop, principal, &wsize, &psn, &cookie, token) != 6) {
		printf("FAIL bad prepare line: %s", buf);
		exit(1);
	}
	rc_prepare_req req;
	memset(&req, 0, sizeof req);
	for (int i = 0; i < 32; i++)
		req.principal.id[i] = (uint8_t)hexbyte(principal + 2 * i);
	req.op = (uint8_t)wop;
	req.target = str("/bucket/key");
	req.size = wsize;
	req.client_psn = psn;
	req.cookie = cookie;
	req.client_token = str(token);
	rc_prepare_resp resp;
	int rc = rc_prepare(srv, &req, &resp);
	CHECK(rc == RC_OK, "%s of %zu: rc_prepare = %d", op ? "PUT" : "GET", size, rc);
	if (rc != RC_OK)
		exit(1);
	memcpy(sid, resp.session_id, 33);
	uint8_t *object = malloc(size ? size : 1);
	pattern(object, size, seed);
	if (op == 0) {
		rc_staging_lease lease;
		CHECK(rc_borrow_staging(srv, str(sid), &lease) == RC_OK && lease.capacity == size, "borrow");
		memcpy(lease.buf, object, size);
		CHECK(rc_finish_staging(srv, lease, 1, size, str("etag-get"), str("")) == RC_OK, "finish_staging");
	}
	CHECK(rc_finish_prepare(srv, str(sid), 1) == RC_OK, "finish_prepare");
	fprintf(to_client, "reply %s %u %u %llu %u %.*s\n", sid, resp.server_qpn, resp.server_psn,
		(unsigned long long)resp.staging_addr, resp.staging_rkey, (int)resp.reply_len, resp.reply_token);
	fflush(to_client);
	line(buf, sizeof buf, "ready ");
	unsigned qpn, rkey;
	unsigned long long addr;
	if (sscanf(buf, "ready %u %llu %u", &qpn, &addr, &rkey) != 3) {
		printf("FAIL bad ready line: %s", buf);
		exit(1);
	}
	struct ready r;
	memset(&r, 0, sizeof r);
	r.srv = srv;
	r.req.principal = req.principal;
	r.req.session_id = str(sid);
	r.req.cookie = cookie;
	r.req.client_qpn = qpn;
	r.req.client_mr_addr = addr;
	r.req.client_mr_rkey = rkey;
	pthread_t t;
	pthread_create(&t, NULL, ready_thread, &r);
	line(buf, sizeof buf, "done ");
	pthread_join(t, NULL);
	CHECK(r.rc == RC_OK && r.resp.outcome == RC_READY_OK && r.resp.bytes_transferred == size,
	      "%s of %zu: READY = %d, outcome %d, %llu bytes", op ? "PUT" : "GET", size, r.rc, r.resp.outcome,
	      (unsigned long long)r.resp.bytes_transferred);
	unsigned long long sum = strtoull(buf + 5, NULL, 16);
	if (op == 0) {
		CHECK(r.resp.etag_len == 8 && memcmp(r.resp.etag, "etag-get", 8) == 0, "the staged etag comes back");
		CHECK(sum == fnv1a(object, size), "GET of %zu: the client received other bytes", size);
		CHECK(rc_finish_final(srv, str(sid)) == RC_OK, "finish_final");
	} else {
		rc_put_view view;
		CHECK(rc_get_put_data(srv, str(sid), &view) == RC_OK && view.len == size, "get_put_data");
		CHECK(fnv1a(view.buf, view.len) == fnv1a(object, size) && sum == fnv1a(object, size),
		      "PUT of %zu: the server received other bytes", size);
		CHECK(rc_finish_put(srv, view, 1, str("etag-put"), str("")) == RC_OK, "finish_put");
	}
	free(object);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: transfer_test RC_CLIENT CLIENT_ENDPOINT [GID_HINT]\n");
		return 2;
	}
	int in[2], out[2];
	if (pipe(in) || pipe(out))
		return 2;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		/* The client has its own endpoint: not the server's device. */
		unsetenv("LD_LIBRARY_PATH");
		execl(argv[1], argv[1], argv[2], (char *)NULL);
		perror("exec rc_client");
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	to_client = fdopen(in[1], "w");
	from_client = fdopen(out[0], "r");

	rc_device_opts o;
	memset(&o, 0, sizeof o);
	o.gid_hint = argc > 3 ? argv[3] : NULL;
	o.gid_index = -1;
	o.max_sessions = 16;
	o.max_user_sessions = 16;
	o.max_staging_bytes = 1 << 26;
	o.max_user_staging_bytes = 1 << 26;
	o.max_qps = 16;
	o.t_prep_ms = 10000;
	o.t_exec_ms = 10000;
	rc_server *srv = NULL;
	if (rc_server_init(&o, &srv) != RC_OK) {
		printf("FAIL rc_server_init\n");
		return 1;
	}
	rc_server_set_terminal_notify(srv, on_terminal, NULL);
	size_t sizes[] = {1, 4096, 65537, 1 << 20, 4 << 20};
	uint64_t total = 0;
	for (int i = 0; i < 5; i++) {
		transfer(srv, 0, sizes[i], (uint8_t)i);
		transfer(srv, 1, sizes[i], (uint8_t)(100 + i));
		total += 2 * sizes[i];
	}
	fprintf(to_client, "quit\n");
	fflush(to_client);
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client exited %d", status);
	rc_server_destroy(srv);
	CHECK(ended == 10 && ended_ok == 10 && ended_bytes == total,
	      "terminal notifications: %d (%d OK), %llu bytes of %llu", ended, ended_ok,
	      (unsigned long long)ended_bytes, (unsigned long long)total);
	printf("transfer: GET and PUT of 1 B, 4 KiB, 64 KiB + 1, 1 MiB and 4 MiB over RC; %d checks, %d failed\n",
	       checks, failures);
	return failures != 0;
}
