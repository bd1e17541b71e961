/* The verbs, driven from C as a real program drives them: compiled against
 * the system's <infiniband/verbs.h> (so the inline verbs reach the library
 * through the context's operations and the verbs_context), linked with
 * -libverbs, and run with LD_LIBRARY_PATH at rctb's libibverbs.so.1.
 *
 * One process, two devices (RCTB_IBV_ADDR=a,b gives rctb0 on a and rctb1 on
 * b; this program sets 127.0.0.1,127.0.0.2 when it is unset), RC QPs connected by hand across
 * them. One line per check, "ok - name" or "not ok - name: why"; the exit
 * status is the number of failures (capped), so zero means all passed. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static int n_checks, n_failed;

static int check(int cond, const char *name, const char *fmt, ...)
{
	n_checks++;
	if (cond) {
		printf("ok - %s\n", name);
	} else {
		va_list ap;
		n_failed++;
		printf("not ok - %s: ", name);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
	fflush(stdout);
	return cond;
}

/* Stops the program: a step every later check depends on failed. */
static void fatal(const char *what)
{
	printf("not ok - %s: fatal (errno %d: %s)\n", what, errno, strerror(errno));
	printf("# %d checks, %d failed (stopped early)\n", n_checks, n_failed + 1);
	exit(1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls one completion, for up to `ms` milliseconds; 1, 0 on timeout, <0 on error. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	uint64_t end = now_ms() + ms;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n;
		if (now_ms() > end)
			return 0;
		usleep(20);
	}
}

/* Checks a completion: polled in time, status, opcode, wr_id. */
static int expect_wc(struct ibv_cq *cq, struct ibv_wc *wc, const char *name, enum ibv_wc_status status,
		     int opcode, uint64_t wr_id)
{
	memset(wc, 0, sizeof(*wc));
	int n = wait_wc(cq, wc, 5000);
	if (n != 1)
		return check(0, name, "no completion within 5 s (poll returned %d)", n);
	if (wc->status != status)
		return check(0, name, "status %s (%d), expected %s", ibv_wc_status_str(wc->status), wc->status,
			     ibv_wc_status_str(status));
	if (wc->wr_id != wr_id)
		return check(0, name, "wr_id %llu, expected %llu", (unsigned long long)wc->wr_id,
			     (unsigned long long)wr_id);
	/* The opcode of an error completion is undefined (flushes included). */
	if (status == IBV_WC_SUCCESS && opcode >= 0 && (int)wc->opcode != opcode)
		return check(0, name, "opcode %d, expected %d", wc->opcode, opcode);
	return check(1, name, "");
}

/* No completion arrives within `ms`. */
static void expect_empty(struct ibv_cq *cq, const char *name, int ms)
{
	struct ibv_wc wc;
	int n = wait_wc(cq, &wc, ms);
	check(n == 0, name, "unexpected completion: wr_id %llu status %d opcode %d", (unsigned long long)wc.wr_id,
	      wc.status, wc.opcode);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 8) * 13);
}

/* Byte-for-byte comparison; names the first difference. */
static void expect_bytes(const void *got, const void *want, size_t n, const char *name)
{
	const uint8_t *g = got, *w = want;
	for (size_t i = 0; i < n; i++) {
		if (g[i] != w[i]) {
			check(0, name, "byte %zu of %zu is 0x%02x, expected 0x%02x", i, n, g[i], w[i]);
			return;
		}
	}
	check(1, name, "");
}

/* ---- the two sides ---- */

#define BUF_SIZE (4u << 20)
#define MIB (1u << 20)
#define ACCESS_ALL                                                                                            \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t *buf;
	struct ibv_mr *mr;
	union ibv_gid gid;
	enum ibv_mtu mtu;
};

static struct side S[2];
/* The devices' IPv4 addresses (network order), from RCTB_IBV_ADDR. */
static uint8_t ADDR[2][4];

static void read_addrs(void)
{
	char tmp[64];
	const char *env = getenv("RCTB_IBV_ADDR");
	snprintf(tmp, sizeof(tmp), "%s", env);
	char *comma = strchr(tmp, ',');
	if (!comma)
		fatal("RCTB_IBV_ADDR must name two addresses");
	*comma = 0;
	if (inet_pton(AF_INET, tmp, ADDR[0]) != 1 || inet_pton(AF_INET, comma + 1, ADDR[1]) != 1)
		fatal("RCTB_IBV_ADDR must name two IPv4 addresses");
}

/* EUI-64 of the port's MAC 02:00:a:b:c:d (the local bit flipped back):
 * 00:00:a:ff:fe:b:c:d. */
static uint64_t expected_guid(int i)
{
	const uint8_t *a = ADDR[i];
	uint8_t g[8] = { 0x00, 0x00, a[0], 0xff, 0xfe, a[1], a[2], a[3] };
	uint64_t v = 0;
	for (int k = 0; k < 8; k++)
		v = v << 8 | g[k];
	return v;
}

struct pair {
	struct ibv_qp *a, *b; /* a on rctb0, b on rctb1 */
	struct ibv_cq *acq, *bcq;
};

static struct ibv_qp *make_qp(struct side *s, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq,
			      uint32_t inline_data)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.srq = srq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4, .max_recv_sge = 4,
			 .max_inline_data = inline_data },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	return ibv_create_qp(s->pd, &ia);
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, struct side *self, struct side *peer, uint32_t dest_qpn, uint32_t rq_psn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = self->mtu,
		.dest_qp_num = dest_qpn,
		.rq_psn = rq_psn,
		.max_dest_rd_atomic = 16,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1, .sl = 0,
			     .grh = { .dgid = peer->gid, .sgid_index = 0, .hop_limit = 64 } },
	};
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp, uint32_t sq_psn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.sq_psn = sq_psn,
		.max_rd_atomic = 16,
	};
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC);
}

static void connect_pair(struct pair *p, const char *name)
{
	char what[128];
	snprintf(what, sizeof(what), "%s: INIT/RTR/RTS on both QPs", name);
	if (to_init(p->a) || to_init(p->b) || to_rtr(p->a, &S[0], &S[1], p->b->qp_num, 0x1000) ||
	    to_rtr(p->b, &S[1], &S[0], p->a->qp_num, 0x2000) || to_rts(p->a, 0x2000) || to_rts(p->b, 0x1000))
		fatal(what);
	check(p->a->state == IBV_QPS_RTS && p->b->state == IBV_QPS_RTS, what, "qp->state %d/%d", p->a->state,
	      p->b->state);
}

/* A connected pair with its own CQs; `srq` (on rctb1) feeds b's receives. */
static struct pair new_pair(const char *name, struct ibv_srq *srq, uint32_t inline_data)
{
	struct pair p;
	p.acq = ibv_create_cq(S[0].ctx, 256, NULL, NULL, 0);
	p.bcq = ibv_create_cq(S[1].ctx, 256, NULL, NULL, 0);
	if (!p.acq || !p.bcq)
		fatal("ibv_create_cq");
	p.a = make_qp(&S[0], p.acq, p.acq, NULL, inline_data);
	p.b = make_qp(&S[1], p.bcq, p.bcq, srq, inline_data);
	if (!p.a || !p.b)
		fatal("ibv_create_qp");
	connect_pair(&p, name);
	return p;
}

static void free_pair(struct pair *p, const char *name)
{
	int r1 = ibv_destroy_qp(p->a), r2 = ibv_destroy_qp(p->b);
	int r3 = ibv_destroy_cq(p->acq), r4 = ibv_destroy_cq(p->bcq);
	check(!r1 && !r2 && !r3 && !r4, name, "destroy qp %d %d, cq %d %d", r1, r2, r3, r4);
}

/* ---- posting helpers ---- */

static int post_recv(struct ibv_qp *qp, uint64_t wr_id, struct side *s, size_t off, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->buf + off), .length = len, .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	return ibv_post_recv(qp, &wr, &bad);
}

static int post_srq(struct ibv_srq *srq, uint64_t wr_id, struct side *s, size_t off, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->buf + off), .length = len, .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	return ibv_post_srq_recv(srq, &wr, &bad);
}

/* One send WR of one SGE from side `s` at `off`. */
static int post_one(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, unsigned flags, struct side *s,
		    size_t off, uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->buf + off), .length = len, .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = flags },
			   *bad = NULL;
	wr.imm_data = htobe32(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* ---- the checks ---- */

static void test_devices(struct ibv_device **list, int n)
{
	check(n == 2, "ibv_get_device_list: two devices", "got %d", n);
	if (n < 2 || !list[0] || !list[1] || list[2] != NULL)
		fatal("ibv_get_device_list");
	check(!strcmp(ibv_get_device_name(list[0]), "rctb0") && !strcmp(ibv_get_device_name(list[1]), "rctb1"),
	      "ibv_get_device_name: rctb0, rctb1", "got %s, %s", ibv_get_device_name(list[0]),
	      ibv_get_device_name(list[1]));
	/* The GUID is the EUI-64 of the port's MAC 02:00:<IPv4>. */
	uint64_t g0 = be64toh(ibv_get_device_guid(list[0])), g1 = be64toh(ibv_get_device_guid(list[1]));
	check(g0 == expected_guid(0) && g1 == expected_guid(1), "ibv_get_device_guid", "%016llx %016llx",
	      (unsigned long long)g0, (unsigned long long)g1);
	check(list[0]->transport_type == IBV_TRANSPORT_IB && list[0]->node_type == IBV_NODE_CA,
	      "ibv_device: node and transport type", "node %d transport %d", list[0]->node_type,
	      list[0]->transport_type);
}

static void test_queries(struct side *s, int idx, uint64_t guid)
{
	struct ibv_device_attr da;
	memset(&da, 0, sizeof(da));
	int rc = ibv_query_device(s->ctx, &da);
	check(rc == 0 && da.phys_port_cnt == 1 && da.node_guid == guid && da.max_qp_wr >= 64 && da.max_sge >= 4 &&
		      da.max_cqe >= 256 && da.atomic_cap != IBV_ATOMIC_NONE && da.max_srq > 0,
	      "ibv_query_device", "rc %d ports %d guid %llx max_qp_wr %d max_sge %d max_cqe %d atomic %d", rc,
	      da.phys_port_cnt, (unsigned long long)da.node_guid, da.max_qp_wr, da.max_sge, da.max_cqe,
	      da.atomic_cap);

	/* The inline (verbs_context->query_port, the caller's struct size). */
	struct ibv_port_attr pa;
	memset(&pa, 0xa5, sizeof(pa));
	rc = ibv_query_port(s->ctx, 1, &pa);
	check(rc == 0 && pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      pa.gid_tbl_len >= 1 && pa.active_mtu >= IBV_MTU_1024 && pa.max_mtu >= pa.active_mtu &&
		      pa.pkey_tbl_len >= 1 && pa.port_cap_flags2 == 0,
	      "ibv_query_port (inline)", "rc %d state %d link %d gids %d mtu %d/%d flags2 %x", rc, pa.state,
	      pa.link_layer, pa.gid_tbl_len, pa.active_mtu, pa.max_mtu, pa.port_cap_flags2);
	s->mtu = pa.active_mtu;

	/* The exported function, as a program built against an older header calls it. */
	struct ibv_port_attr pc;
	memset(&pc, 0, sizeof(pc));
	rc = (ibv_query_port)(s->ctx, 1, (struct _compat_ibv_port_attr *)&pc);
	check(rc == 0 && pc.state == IBV_PORT_ACTIVE && pc.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      pc.active_mtu == pa.active_mtu && pc.gid_tbl_len == pa.gid_tbl_len,
	      "ibv_query_port (exported)", "rc %d state %d link %d mtu %d", rc, pc.state, pc.link_layer,
	      pc.active_mtu);
	rc = ibv_query_port(s->ctx, 2, &pa);
	check(rc != 0, "ibv_query_port: port 2 does not exist", "rc %d", rc);

	union ibv_gid gid;
	uint8_t want[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	memcpy(want + 12, ADDR[idx], 4);
	rc = ibv_query_gid(s->ctx, 1, 0, &gid);
	check(rc == 0 && !memcmp(gid.raw, want, 16), "ibv_query_gid: index 0 is ::ffff:<address>",
	      "rc %d, gid %02x%02x..%02x%02x%02x%02x", rc, gid.raw[0], gid.raw[1], gid.raw[12], gid.raw[13],
	      gid.raw[14], gid.raw[15]);
	s->gid = gid;

	struct ibv_gid_entry ge;
	memset(&ge, 0, sizeof(ge));
	rc = ibv_query_gid_ex(s->ctx, 1, 0, &ge, 0);
	check(rc == 0 && !memcmp(ge.gid.raw, want, 16) && ge.gid_index == 0 && ge.port_num == 1 &&
		      ge.gid_type == IBV_GID_TYPE_ROCE_V2,
	      "ibv_query_gid_ex: RoCE v2 entry", "rc %d index %u port %u type %u", rc, ge.gid_index, ge.port_num,
	      ge.gid_type);
	rc = ibv_query_gid_ex(s->ctx, 1, 1, &ge, 0);
	check(rc != 0, "ibv_query_gid_ex: index 1 is empty", "rc %d", rc);

	uint16_t pkey = 0;
	rc = ibv_query_pkey(s->ctx, 1, 0, &pkey);
	check(rc == 0 && be16toh(pkey) == 0xffff, "ibv_query_pkey: default P_Key", "rc %d pkey %04x", rc,
	      be16toh(pkey));

	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof(dx));
	rc = ibv_query_device_ex(s->ctx, NULL, &dx);
	check(rc == 0 && dx.orig_attr.phys_port_cnt == 1 && dx.orig_attr.node_guid == guid,
	      "ibv_query_device_ex (inline)", "rc %d ports %d", rc, dx.orig_attr.phys_port_cnt);
}

static void test_send(struct pair *p)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;

	/* SEND */
	fill(A->buf, 4096, 1);
	memset(B->buf, 0, 8192);
	check(post_recv(p->b, 100, B, 0, 8192) == 0, "post_recv", "");
	check(post_one(p->a, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 4096, 0, 0, 0) == 0, "SEND: post", "");
	expect_wc(p->acq, &wc, "SEND: sender completion", IBV_WC_SUCCESS, IBV_WC_SEND, 1);
	if (expect_wc(p->bcq, &wc, "SEND: receiver completion", IBV_WC_SUCCESS, IBV_WC_RECV, 100)) {
		check(wc.byte_len == 4096, "SEND: byte_len", "%u", wc.byte_len);
		check(wc.qp_num == p->b->qp_num, "SEND: qp_num is the receiving QP", "%u vs %u", wc.qp_num,
		      p->b->qp_num);
		check(!(wc.wc_flags & IBV_WC_WITH_IMM), "SEND: no immediate flag", "wc_flags %x", wc.wc_flags);
		expect_bytes(B->buf, A->buf, 4096, "SEND: data");
	}

	/* SEND_WITH_IMM */
	fill(A->buf, 100, 2);
	check(post_recv(p->b, 101, B, 0, 8192) == 0, "post_recv", "");
	check(post_one(p->a, 2, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED, A, 0, 100, 0, 0, 0x12345678) == 0,
	      "SEND_WITH_IMM: post", "");
	expect_wc(p->acq, &wc, "SEND_WITH_IMM: sender completion", IBV_WC_SUCCESS, IBV_WC_SEND, 2);
	if (expect_wc(p->bcq, &wc, "SEND_WITH_IMM: receiver completion", IBV_WC_SUCCESS, IBV_WC_RECV, 101)) {
		check(wc.byte_len == 100, "SEND_WITH_IMM: byte_len", "%u", wc.byte_len);
		check((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0x12345678,
		      "SEND_WITH_IMM: imm_data", "flags %x imm %08x", wc.wc_flags, be32toh(wc.imm_data));
		check(wc.qp_num == p->b->qp_num, "SEND_WITH_IMM: qp_num", "%u", wc.qp_num);
		expect_bytes(B->buf, A->buf, 100, "SEND_WITH_IMM: data");
	}

	/* A zero-length SEND */
	check(post_recv(p->b, 102, B, 0, 8192) == 0, "post_recv", "");
	check(post_one(p->a, 3, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 0, 0, 0, 0) == 0, "SEND 0 bytes: post", "");
	expect_wc(p->acq, &wc, "SEND 0 bytes: sender completion", IBV_WC_SUCCESS, IBV_WC_SEND, 3);
	if (expect_wc(p->bcq, &wc, "SEND 0 bytes: receiver completion", IBV_WC_SUCCESS, IBV_WC_RECV, 102))
		check(wc.byte_len == 0, "SEND 0 bytes: byte_len", "%u", wc.byte_len);
}

static void test_rdma(struct pair *p)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	uint64_t braddr = (uintptr_t)B->buf;

	/* RDMA_WRITE into B at offset 64 Ki */
	fill(A->buf, 3000, 3);
	memset(B->buf + 65536, 0, 4096);
	check(post_one(p->a, 10, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, A, 0, 3000, braddr + 65536, B->mr->rkey, 0) ==
		      0,
	      "RDMA_WRITE: post", "");
	if (expect_wc(p->acq, &wc, "RDMA_WRITE: completion", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 10)) {
		expect_bytes(B->buf + 65536, A->buf, 3000, "RDMA_WRITE: data");
		check(B->buf[65536 + 3000] == 0, "RDMA_WRITE: nothing past the end", "");
	}
	expect_empty(p->bcq, "RDMA_WRITE: no receive completion at the target", 50);

	/* RDMA_WRITE_WITH_IMM: consumes a receive */
	fill(A->buf, 500, 4);
	check(post_recv(p->b, 110, B, 0, 16) == 0, "post_recv", "");
	check(post_one(p->a, 11, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, A, 0, 500, braddr + 131072,
		       B->mr->rkey, 0xcafef00d) == 0,
	      "RDMA_WRITE_WITH_IMM: post", "");
	expect_wc(p->acq, &wc, "RDMA_WRITE_WITH_IMM: sender completion", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 11);
	if (expect_wc(p->bcq, &wc, "RDMA_WRITE_WITH_IMM: receiver completion", IBV_WC_SUCCESS,
		      IBV_WC_RECV_RDMA_WITH_IMM, 110)) {
		check((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0xcafef00d,
		      "RDMA_WRITE_WITH_IMM: imm_data", "flags %x imm %08x", wc.wc_flags, be32toh(wc.imm_data));
		check(wc.byte_len == 500, "RDMA_WRITE_WITH_IMM: byte_len", "%u", wc.byte_len);
		check(wc.qp_num == p->b->qp_num, "RDMA_WRITE_WITH_IMM: qp_num", "%u", wc.qp_num);
		expect_bytes(B->buf + 131072, A->buf, 500, "RDMA_WRITE_WITH_IMM: data");
	}

	/* RDMA_READ from B */
	fill(B->buf + 200000, 5000, 5);
	memset(A->buf + 300000, 0, 5000);
	check(post_one(p->a, 12, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, A, 300000, 5000, braddr + 200000, B->mr->rkey,
		       0) == 0,
	      "RDMA_READ: post", "");
	if (expect_wc(p->acq, &wc, "RDMA_READ: completion", IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 12)) {
		check(wc.byte_len == 5000, "RDMA_READ: byte_len", "%u", wc.byte_len);
		expect_bytes(A->buf + 300000, B->buf + 200000, 5000, "RDMA_READ: data");
	}
}

static int post_atomic(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, size_t loff, uint64_t raddr,
		       uint32_t rkey, uint64_t compare_add, uint64_t swap)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(S[0].buf + loff), .length = 8, .lkey = S[0].mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return ibv_post_send(qp, &wr, &bad);
}

static void test_atomics(struct pair *p)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	uint64_t *target = (uint64_t *)(B->buf + 400000), *result = (uint64_t *)(A->buf + 400000);
	uint64_t raddr = (uintptr_t)target;

	*target = 100;
	*result = 0;
	check(post_atomic(p->a, 20, IBV_WR_ATOMIC_FETCH_AND_ADD, 400000, raddr, B->mr->rkey, 5, 0) == 0,
	      "FETCH_AND_ADD: post", "");
	if (expect_wc(p->acq, &wc, "FETCH_AND_ADD: completion", IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, 20)) {
		check(wc.byte_len == 8, "FETCH_AND_ADD: byte_len", "%u", wc.byte_len);
		check(*result == 100 && *target == 105, "FETCH_AND_ADD: old value returned, target added",
		      "result %llu target %llu", (unsigned long long)*result, (unsigned long long)*target);
	}

	*result = 0;
	check(post_atomic(p->a, 21, IBV_WR_ATOMIC_CMP_AND_SWP, 400000, raddr, B->mr->rkey, 105, 7) == 0,
	      "CMP_AND_SWP (equal): post", "");
	if (expect_wc(p->acq, &wc, "CMP_AND_SWP (equal): completion", IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, 21))
		check(*result == 105 && *target == 7, "CMP_AND_SWP (equal): swapped", "result %llu target %llu",
		      (unsigned long long)*result, (unsigned long long)*target);

	*result = 0;
	check(post_atomic(p->a, 22, IBV_WR_ATOMIC_CMP_AND_SWP, 400000, raddr, B->mr->rkey, 999, 1) == 0,
	      "CMP_AND_SWP (different): post", "");
	if (expect_wc(p->acq, &wc, "CMP_AND_SWP (different): completion", IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, 22))
		check(*result == 7 && *target == 7, "CMP_AND_SWP (different): not swapped", "result %llu target %llu",
		      (unsigned long long)*result, (unsigned long long)*target);
}

static void test_large_and_sges(struct pair *p)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;

	/* 1 MiB SEND: many packets at any MTU */
	fill(A->buf, MIB, 6);
	memset(B->buf, 0, MIB + 16);
	check(post_recv(p->b, 200, B, 0, MIB + 16) == 0, "post_recv 1 MiB", "");
	check(post_one(p->a, 30, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, MIB, 0, 0, 0) == 0, "SEND 1 MiB: post", "");
	expect_wc(p->acq, &wc, "SEND 1 MiB: sender completion", IBV_WC_SUCCESS, IBV_WC_SEND, 30);
	if (expect_wc(p->bcq, &wc, "SEND 1 MiB: receiver completion", IBV_WC_SUCCESS, IBV_WC_RECV, 200)) {
		check(wc.byte_len == MIB, "SEND 1 MiB: byte_len", "%u", wc.byte_len);
		expect_bytes(B->buf, A->buf, MIB, "SEND 1 MiB: data");
	}

	/* 1 MiB RDMA_WRITE and RDMA_READ back */
	fill(A->buf, MIB, 7);
	memset(B->buf + 2 * MIB, 0, MIB);
	check(post_one(p->a, 31, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, A, 0, MIB, (uintptr_t)B->buf + 2 * MIB,
		       B->mr->rkey, 0) == 0,
	      "RDMA_WRITE 1 MiB: post", "");
	if (expect_wc(p->acq, &wc, "RDMA_WRITE 1 MiB: completion", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 31))
		expect_bytes(B->buf + 2 * MIB, A->buf, MIB, "RDMA_WRITE 1 MiB: data");
	memset(A->buf + 2 * MIB, 0, MIB);
	check(post_one(p->a, 32, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, A, 2 * MIB, MIB, (uintptr_t)B->buf + 2 * MIB,
		       B->mr->rkey, 0) == 0,
	      "RDMA_READ 1 MiB: post", "");
	if (expect_wc(p->acq, &wc, "RDMA_READ 1 MiB: completion", IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 32)) {
		check(wc.byte_len == MIB, "RDMA_READ 1 MiB: byte_len", "%u", wc.byte_len);
		expect_bytes(A->buf + 2 * MIB, A->buf, MIB, "RDMA_READ 1 MiB: data");
	}

	/* Three SGEs gathered on send, scattered into two SGEs on receive. */
	uint8_t want[700];
	fill(A->buf + 1000, 100, 8);
	fill(A->buf + 5000, 250, 9);
	fill(A->buf + 9000, 350, 10);
	memcpy(want, A->buf + 1000, 100);
	memcpy(want + 100, A->buf + 5000, 250);
	memcpy(want + 350, A->buf + 9000, 350);
	memset(B->buf + 20000, 0, 1000);
	memset(B->buf + 30000, 0, 1000);
	struct ibv_sge rs[2] = {
		{ .addr = (uintptr_t)(B->buf + 20000), .length = 300, .lkey = B->mr->lkey },
		{ .addr = (uintptr_t)(B->buf + 30000), .length = 600, .lkey = B->mr->lkey },
	};
	struct ibv_recv_wr rwr = { .wr_id = 210, .sg_list = rs, .num_sge = 2 }, *rbad = NULL;
	check(ibv_post_recv(p->b, &rwr, &rbad) == 0, "post_recv with 2 SGEs", "");
	struct ibv_sge ss[3] = {
		{ .addr = (uintptr_t)(A->buf + 1000), .length = 100, .lkey = A->mr->lkey },
		{ .addr = (uintptr_t)(A->buf + 5000), .length = 250, .lkey = A->mr->lkey },
		{ .addr = (uintptr_t)(A->buf + 9000), .length = 350, .lkey = A->mr->lkey },
	};
	struct ibv_send_wr swr = { .wr_id = 33, .sg_list = ss, .num_sge = 3, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED },
			   *sbad = NULL;
	check(ibv_post_send(p->a, &swr, &sbad) == 0, "SEND with 3 SGEs: post", "");
	expect_wc(p->acq, &wc, "SEND with 3 SGEs: sender completion", IBV_WC_SUCCESS, IBV_WC_SEND, 33);
	if (expect_wc(p->bcq, &wc, "SEND with 3 SGEs: receiver completion", IBV_WC_SUCCESS, IBV_WC_RECV, 210)) {
		check(wc.byte_len == 700, "SEND with 3 SGEs: byte_len", "%u", wc.byte_len);
		expect_bytes(B->buf + 20000, want, 300, "SEND with 3 SGEs: first receive SGE");
		expect_bytes(B->buf + 30000, want + 300, 400, "SEND with 3 SGEs: second receive SGE");
		check(B->buf[30000 + 400] == 0, "SEND with 3 SGEs: nothing past the message", "");
	}

	/* A chain of two WRs in one post, gather-write with two SGEs. */
	memset(B->buf + 40000, 0, 400);
	struct ibv_send_wr w2 = { .wr_id = 35, .sg_list = &ss[1], .num_sge = 2, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED },
			   w1 = { .wr_id = 34, .next = &w2, .sg_list = ss, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED };
	w1.wr.rdma.remote_addr = (uintptr_t)B->buf + 40000;
	w1.wr.rdma.rkey = B->mr->rkey;
	w2.wr.rdma.remote_addr = (uintptr_t)B->buf + 40100;
	w2.wr.rdma.rkey = B->mr->rkey;
	check(ibv_post_send(p->a, &w1, &sbad) == 0, "two chained RDMA_WRITEs: post", "");
	expect_wc(p->acq, &wc, "chained RDMA_WRITE 1: completion", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 34);
	if (expect_wc(p->acq, &wc, "chained RDMA_WRITE 2: completion", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 35))
		expect_bytes(B->buf + 40000, want, 700, "chained RDMA_WRITEs: data");
}

static void test_inline(struct pair *p)
{
	struct side *B = &S[1];
	struct ibv_wc wc;
	uint8_t src[64], orig[64];

	fill(src, 64, 11);
	memcpy(orig, src, 64);
	memset(B->buf, 0, 128);
	check(post_recv(p->b, 300, B, 0, 128) == 0, "post_recv", "");
	/* An inline SGE's lkey is not looked at: src is not registered. */
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = 64, .lkey = 0 };
	struct ibv_send_wr wr = { .wr_id = 40, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE },
			   *bad = NULL;
	int rc = ibv_post_send(p->a, &wr, &bad);
	memset(src, 0xee, sizeof(src)); /* the buffer is the program's again */
	check(rc == 0, "inline SEND: post", "rc %d", rc);
	expect_wc(p->acq, &wc, "inline SEND: sender completion", IBV_WC_SUCCESS, IBV_WC_SEND, 40);
	if (expect_wc(p->bcq, &wc, "inline SEND: receiver completion", IBV_WC_SUCCESS, IBV_WC_RECV, 300)) {
		check(wc.byte_len == 64, "inline SEND: byte_len", "%u", wc.byte_len);
		expect_bytes(B->buf, orig, 64, "inline SEND: peer got the bytes as they were at post time");
	}

	/* Inline RDMA_WRITE from two unregistered pieces. */
	uint8_t x[10], y[20], want[30];
	fill(x, 10, 12);
	fill(y, 20, 13);
	memcpy(want, x, 10);
	memcpy(want + 10, y, 20);
	struct ibv_sge two[2] = { { .addr = (uintptr_t)x, .length = 10 }, { .addr = (uintptr_t)y, .length = 20 } };
	struct ibv_send_wr w2 = { .wr_id = 41, .sg_list = two, .num_sge = 2, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	w2.wr.rdma.remote_addr = (uintptr_t)B->buf + 1000;
	w2.wr.rdma.rkey = B->mr->rkey;
	rc = ibv_post_send(p->a, &w2, &bad);
	memset(x, 0, sizeof(x));
	memset(y, 0, sizeof(y));
	check(rc == 0, "inline RDMA_WRITE with 2 SGEs: post", "rc %d", rc);
	if (expect_wc(p->acq, &wc, "inline RDMA_WRITE: completion", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 41))
		expect_bytes(B->buf + 1000, want, 30, "inline RDMA_WRITE: data");

	/* More than max_inline_data: refused at post. */
	uint8_t big[65] = { 0 };
	struct ibv_sge bs = { .addr = (uintptr_t)big, .length = 65 };
	wr.sg_list = &bs;
	wr.wr_id = 42;
	bad = NULL;
	rc = ibv_post_send(p->a, &wr, &bad);
	check(rc == EINVAL && bad == &wr, "inline SEND larger than max_inline_data: EINVAL", "rc %d", rc);
}

static void test_unsignaled(struct pair *p)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;

	fill(A->buf, 300, 14);
	for (int i = 0; i < 3; i++)
		post_recv(p->b, 400 + i, B, 1000 * i, 1000);
	int rc = 0;
	rc |= post_one(p->a, 50, IBV_WR_SEND, 0, A, 0, 100, 0, 0, 0);
	rc |= post_one(p->a, 51, IBV_WR_SEND, 0, A, 100, 100, 0, 0, 0);
	rc |= post_one(p->a, 52, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 200, 100, 0, 0, 0);
	check(rc == 0, "unsignaled: post 2 unsignaled + 1 signaled", "");
	expect_wc(p->acq, &wc, "unsignaled: only the signaled one completes", IBV_WC_SUCCESS, IBV_WC_SEND, 52);
	for (int i = 0; i < 3; i++) {
		char name[64];
		snprintf(name, sizeof(name), "unsignaled: receive %d", i);
		if (expect_wc(p->bcq, &wc, name, IBV_WC_SUCCESS, IBV_WC_RECV, 400 + i)) {
			snprintf(name, sizeof(name), "unsignaled: receive %d data", i);
			expect_bytes(B->buf + 1000 * i, A->buf + 100 * i, 100, name);
		}
	}
	expect_empty(p->acq, "unsignaled: no completion for the unsignaled WRs", 50);

	/* The queue drains: rounds of max_send_wr WRs, only the last signaled,
	 * would overflow a 64-entry send queue if unsignaled WRs kept slots. */
	int ok = 1;
	for (int round = 0; round < 4 && ok; round++) {
		for (int i = 0; i < 64; i++) {
			unsigned flags = i == 63 ? IBV_SEND_SIGNALED : 0;
			rc = post_one(p->a, 1000 + round * 64 + i, IBV_WR_RDMA_WRITE, flags, A, 0, 32,
				      (uintptr_t)B->buf + 500000, B->mr->rkey, 0);
			if (rc) {
				check(0, "unsignaled: the send queue drains", "round %d WR %d: post returned %d", round,
				      i, rc);
				ok = 0;
				break;
			}
		}
		if (ok) {
			int n = wait_wc(p->acq, &wc, 5000);
			if (n != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != (uint64_t)(1000 + round * 64 + 63)) {
				check(0, "unsignaled: the send queue drains", "round %d: n %d status %d wr_id %llu",
				      round, n, wc.status, (unsigned long long)wc.wr_id);
				ok = 0;
			}
		}
	}
	if (ok)
		check(1, "unsignaled: the send queue drains (4 x 64 WRs, one signaled each)", "");
	expect_empty(p->acq, "unsignaled: nothing else completes", 50);
}

/* A SEND before the receive is posted: RNR NAKs, retried until it is. */
static void test_rnr(struct pair *p)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	fill(A->buf, 256, 17);
	memset(B->buf, 0, 256);
	check(post_one(p->a, 55, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 256, 0, 0, 0) == 0, "RNR: post", "");
	expect_empty(p->acq, "RNR: no completion while the peer has no receive", 30);
	post_recv(p->b, 450, B, 0, 256);
	expect_wc(p->acq, &wc, "RNR: the send completes once a receive is posted", IBV_WC_SUCCESS, IBV_WC_SEND, 55);
	if (expect_wc(p->bcq, &wc, "RNR: received", IBV_WC_SUCCESS, IBV_WC_RECV, 450))
		expect_bytes(B->buf, A->buf, 256, "RNR: data");
}

/* sq_sig_all = 1: every WR completes, flagged or not; one poll takes several. */
static void test_sig_all(void)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc[8];
	struct pair p;
	p.acq = ibv_create_cq(A->ctx, 64, NULL, NULL, 0);
	p.bcq = ibv_create_cq(B->ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = p.acq, .recv_cq = p.acq,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC, .sq_sig_all = 1 };
	p.a = ibv_create_qp(A->pd, &ia);
	p.b = make_qp(B, p.bcq, p.bcq, NULL, 0);
	if (!p.acq || !p.bcq || !p.a || !p.b)
		fatal("sq_sig_all pair");
	connect_pair(&p, "sq_sig_all pair");
	int rc = 0;
	for (int i = 0; i < 4; i++)
		rc |= post_one(p.a, 60 + i, IBV_WR_RDMA_WRITE, 0, A, 0, 16, (uintptr_t)B->buf + 600000 + 16 * i,
			       B->mr->rkey, 0);
	check(rc == 0, "sq_sig_all: post 4 WRs without IBV_SEND_SIGNALED", "");
	int got = 0;
	uint64_t end = now_ms() + 5000;
	while (got < 4 && now_ms() < end) {
		int n = ibv_poll_cq(p.acq, 8, wc + got);
		if (n < 0)
			break;
		got += n;
	}
	check(got == 4 && wc[0].wr_id == 60 && wc[3].wr_id == 63 && wc[3].status == IBV_WC_SUCCESS,
	      "sq_sig_all: every WR completes, in order", "got %d", got);
	free_pair(&p, "sq_sig_all pair: destroy");
}

static void test_srq(void)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	struct ibv_srq_init_attr sia = { .attr = { .max_wr = 32, .max_sge = 2, .srq_limit = 0 } };
	struct ibv_srq *srq = ibv_create_srq(B->pd, &sia);
	if (!check(srq != NULL, "ibv_create_srq", "errno %d", errno))
		return;
	struct pair p = new_pair("SRQ pair", srq, 0);
	check(p.b->srq == srq, "SRQ: the QP names its SRQ", "");

	for (int i = 0; i < 4; i++)
		check(post_srq(srq, 500 + i, B, 10000 * i, 10000) == 0, "ibv_post_srq_recv", "");
	fill(A->buf, 2000, 15);
	post_one(p.a, 60, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 1000, 0, 0, 0);
	post_one(p.a, 61, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED, A, 1000, 1000, 0, 0, 77);
	expect_wc(p.acq, &wc, "SRQ: send 1 completes", IBV_WC_SUCCESS, IBV_WC_SEND, 60);
	expect_wc(p.acq, &wc, "SRQ: send 2 completes", IBV_WC_SUCCESS, IBV_WC_SEND, 61);
	if (expect_wc(p.bcq, &wc, "SRQ: first receive through the SRQ", IBV_WC_SUCCESS, IBV_WC_RECV, 500)) {
		check(wc.qp_num == p.b->qp_num && wc.byte_len == 1000, "SRQ: qp_num and byte_len", "%u %u",
		      wc.qp_num, wc.byte_len);
		expect_bytes(B->buf, A->buf, 1000, "SRQ: first data");
	}
	if (expect_wc(p.bcq, &wc, "SRQ: second receive through the SRQ", IBV_WC_SUCCESS, IBV_WC_RECV, 501)) {
		check(wc.qp_num == p.b->qp_num && (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 77,
		      "SRQ: second qp_num and imm", "%u %x", wc.qp_num, wc.wc_flags);
		expect_bytes(B->buf + 10000, A->buf + 1000, 1000, "SRQ: second data");
	}

	int rc0 = post_recv(p.b, 599, B, 0, 100);
	check(rc0 == EINVAL, "post_recv on a QP that has an SRQ: EINVAL", "rc %d", rc0);

	struct ibv_srq_attr sa = { .srq_limit = 1 };
	int rc = ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT);
	check(rc == 0, "ibv_modify_srq: limit", "rc %d", rc);
	memset(&sa, 0, sizeof(sa));
	rc = ibv_query_srq(srq, &sa);
	check(rc == 0 && sa.srq_limit == 1 && sa.max_wr >= 32 && sa.max_sge >= 2, "ibv_query_srq", "rc %d limit %u "
	      "max_wr %u max_sge %u", rc, sa.srq_limit, sa.max_wr, sa.max_sge);

	rc = ibv_destroy_srq(srq);
	check(rc == EBUSY, "ibv_destroy_srq while a QP uses it: EBUSY", "rc %d", rc);
	free_pair(&p, "SRQ pair: destroy");
	rc = ibv_destroy_srq(srq);
	check(rc == 0, "ibv_destroy_srq", "rc %d", rc);
}

static void test_channel(void)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	int cq_cookie = 42;

	struct ibv_comp_channel *ch = ibv_create_comp_channel(B->ctx);
	if (!check(ch != NULL && ch->fd >= 0 && ch->context == B->ctx, "ibv_create_comp_channel", "errno %d", errno))
		return;
	int fl = fcntl(ch->fd, F_GETFL);
	check(fl >= 0 && fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "comp channel: O_NONBLOCK", "");
	struct ibv_cq *ccq = ibv_create_cq(B->ctx, 64, &cq_cookie, ch, 0);
	check(ccq != NULL && ccq->channel == ch, "ibv_create_cq with the channel", "errno %d", errno);
	if (!ccq)
		return;
	struct pair p;
	p.acq = ibv_create_cq(A->ctx, 64, NULL, NULL, 0);
	p.bcq = ccq;
	p.a = make_qp(A, p.acq, p.acq, NULL, 0);
	p.b = make_qp(B, ccq, ccq, NULL, 0);
	if (!p.acq || !p.a || !p.b)
		fatal("channel pair");
	connect_pair(&p, "channel pair");

	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ee = { .events = EPOLLIN, .data.u32 = 7 }, out;
	check(ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ee) == 0, "epoll_ctl ADD the channel fd", "errno %d",
	      errno);

	check(ibv_req_notify_cq(ccq, 0) == 0, "ibv_req_notify_cq", "");
	errno = 0;
	int rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check(rc == -1 && errno == EAGAIN, "ibv_get_cq_event before any completion: EAGAIN", "rc %d errno %d", rc,
	      errno);
	check(epoll_wait(ep, &out, 1, 0) == 0, "epoll_wait: not readable before a completion", "");

	for (int i = 0; i < 3; i++)
		post_recv(p.b, 600 + i, B, 1000 * i, 1000);
	fill(A->buf, 64, 16);
	post_one(p.a, 70, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 64, 0, 0, 0);
	expect_wc(p.acq, &wc, "channel: send completes", IBV_WC_SUCCESS, IBV_WC_SEND, 70);
	int n = epoll_wait(ep, &out, 1, 5000);
	check(n == 1 && out.data.u32 == 7 && (out.events & EPOLLIN), "epoll_wait: readable after a SEND arrives",
	      "n %d", n);
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check(rc == 0 && ev_cq == ccq && ev_ctx == &cq_cookie, "ibv_get_cq_event: the CQ and its context",
	      "rc %d errno %d", rc, errno);
	expect_wc(ccq, &wc, "channel: the receive is on the CQ", IBV_WC_SUCCESS, IBV_WC_RECV, 600);
	ibv_ack_cq_events(ccq, 1);

	/* Not re-armed: a second completion raises no second event. */
	post_one(p.a, 71, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 64, 0, 0, 0);
	expect_wc(p.acq, &wc, "channel: second send completes", IBV_WC_SUCCESS, IBV_WC_SEND, 71);
	expect_wc(ccq, &wc, "channel: second receive is on the CQ", IBV_WC_SUCCESS, IBV_WC_RECV, 601);
	errno = 0;
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check(rc == -1 && errno == EAGAIN, "channel: one event per ibv_req_notify_cq (no re-arm, EAGAIN)",
	      "rc %d errno %d", rc, errno);
	check(epoll_wait(ep, &out, 1, 0) == 0, "epoll_wait: not readable without re-arm", "");

	/* Re-armed: the next completion raises one event again. */
	check(ibv_req_notify_cq(ccq, 0) == 0, "ibv_req_notify_cq again", "");
	post_one(p.a, 72, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 64, 0, 0, 0);
	n = epoll_wait(ep, &out, 1, 5000);
	check(n == 1, "epoll_wait: readable after re-arm", "n %d", n);
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check(rc == 0 && ev_cq == ccq, "ibv_get_cq_event after re-arm", "rc %d", rc);
	expect_wc(ccq, &wc, "channel: third receive", IBV_WC_SUCCESS, IBV_WC_RECV, 602);
	expect_wc(p.acq, &wc, "channel: third send completes", IBV_WC_SUCCESS, IBV_WC_SEND, 72);
	ibv_ack_cq_events(ccq, 1);

	/* Solicited only: an unsolicited SEND raises no event, a solicited one does. */
	check(ibv_req_notify_cq(ccq, 1) == 0, "ibv_req_notify_cq solicited only", "");
	post_recv(p.b, 603, B, 0, 1000);
	post_recv(p.b, 604, B, 1000, 1000);
	post_one(p.a, 73, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 64, 0, 0, 0);
	expect_wc(p.acq, &wc, "channel: unsolicited send completes", IBV_WC_SUCCESS, IBV_WC_SEND, 73);
	expect_wc(ccq, &wc, "channel: unsolicited receive is on the CQ", IBV_WC_SUCCESS, IBV_WC_RECV, 603);
	check(epoll_wait(ep, &out, 1, 0) == 0, "solicited only: an unsolicited SEND raises no event", "");
	post_one(p.a, 74, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED, A, 0, 64, 0, 0, 0);
	n = epoll_wait(ep, &out, 1, 5000);
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check(n == 1 && rc == 0 && ev_cq == ccq, "solicited only: a solicited SEND raises the event", "n %d rc %d", n,
	      rc);
	expect_wc(ccq, &wc, "channel: solicited receive", IBV_WC_SUCCESS, IBV_WC_RECV, 604);
	expect_wc(p.acq, &wc, "channel: solicited send completes", IBV_WC_SUCCESS, IBV_WC_SEND, 74);
	ibv_ack_cq_events(ccq, 1);

	close(ep);
	rc = ibv_destroy_comp_channel(ch);
	check(rc == -1 && errno == EBUSY, "ibv_destroy_comp_channel while a CQ uses it: EBUSY", "rc %d errno %d", rc,
	      errno);
	free_pair(&p, "channel pair: destroy QPs and CQs");
	rc = ibv_destroy_comp_channel(ch);
	check(rc == 0, "ibv_destroy_comp_channel", "rc %d errno %d", rc, errno);
}

static void test_errors(struct pair *p)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	int rc;

	/* Unknown opcode: refused at post, *bad_wr names it. */
	struct ibv_sge sge = { .addr = (uintptr_t)A->buf, .length = 8, .lkey = A->mr->lkey };
	struct ibv_send_wr ok = { .wr_id = 80, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   badop = { .wr_id = 81, .sg_list = &sge, .num_sge = 1, .opcode = (enum ibv_wr_opcode)0x7f },
			   *bad = NULL;
	ok.next = &badop;
	post_recv(p->b, 700, B, 0, 100);
	rc = ibv_post_send(p->a, &ok, &bad);
	check(rc == EINVAL && bad == &badop, "post_send: unknown opcode is EINVAL with *bad_wr on it",
	      "rc %d bad %p (wr %p)", rc, (void *)bad, (void *)&badop);
	expect_wc(p->acq, &wc, "post_send: the WR before the bad one went", IBV_WC_SUCCESS, IBV_WC_SEND, 80);
	expect_wc(p->bcq, &wc, "post_send: ... and arrived", IBV_WC_SUCCESS, IBV_WC_RECV, 700);

	/* A chain longer than the send queue: the WRs that fit go, the first
	 * that does not is refused with ENOMEM and named in *bad_wr. */
	static struct ibv_send_wr chain[65];
	for (int i = 0; i < 65; i++) {
		chain[i] = (struct ibv_send_wr){ .wr_id = 2000 + i, .next = i < 64 ? &chain[i + 1] : NULL,
						 .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
						 .send_flags = IBV_SEND_SIGNALED };
		chain[i].wr.rdma.remote_addr = (uintptr_t)B->buf + 700000 + 8 * i;
		chain[i].wr.rdma.rkey = B->mr->rkey;
	}
	bad = NULL;
	rc = ibv_post_send(p->a, chain, &bad);
	check(rc == ENOMEM && bad == &chain[64], "post_send: 65 WRs on a 64-entry send queue: ENOMEM at the 65th",
	      "rc %d bad index %ld", rc, bad ? (long)(bad - chain) : -1L);
	int got = 0, in_order = 1;
	uint64_t end = now_ms() + 5000;
	while (got < 64 && now_ms() < end) {
		if (ibv_poll_cq(p->acq, 1, &wc) == 1) {
			in_order &= wc.wr_id == (uint64_t)(2000 + got) && wc.status == IBV_WC_SUCCESS;
			got++;
		}
	}
	check(got == 64 && in_order, "post_send: the 64 that fit complete, in order", "got %d in order %d", got,
	      in_order);

	/* Too many SGEs for the QP (created with max_send_sge = 4). */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	rc = ibv_query_qp(p->a, &qa, IBV_QP_CAP, &qia);
	check(rc == 0 && qa.cap.max_send_sge >= 4 && qia.cap.max_send_sge == qa.cap.max_send_sge,
	      "ibv_query_qp: cap", "rc %d max_send_sge %u", rc, qa.cap.max_send_sge);
	uint32_t nsge = qa.cap.max_send_sge + 1;
	struct ibv_sge many[64];
	for (uint32_t i = 0; i < nsge && i < 64; i++)
		many[i] = (struct ibv_sge){ .addr = (uintptr_t)A->buf + i, .length = 1, .lkey = A->mr->lkey };
	struct ibv_send_wr msg = { .wr_id = 82, .sg_list = many, .num_sge = (int)nsge, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	bad = NULL;
	rc = ibv_post_send(p->a, &msg, &bad);
	check(rc == EINVAL && bad == &msg, "post_send: more SGEs than max_send_sge is EINVAL", "rc %d (%u SGEs)", rc,
	      nsge);
	struct ibv_recv_wr rmsg = { .wr_id = 701, .sg_list = many, .num_sge = 5 }, *rbad = NULL;
	rc = ibv_post_recv(p->b, &rmsg, &rbad);
	check(rc == EINVAL && rbad == &rmsg, "post_recv: more SGEs than max_recv_sge is EINVAL", "rc %d", rc);
	expect_empty(p->acq, "post_send: refused WRs never complete", 50);

	/* The pair still works. */
	post_recv(p->b, 702, B, 0, 100);
	check(post_one(p->a, 83, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 8, 0, 0, 0) == 0, "after errors: post", "");
	expect_wc(p->acq, &wc, "after errors: the QP still sends", IBV_WC_SUCCESS, IBV_WC_SEND, 83);
	expect_wc(p->bcq, &wc, "after errors: the peer still receives", IBV_WC_SUCCESS, IBV_WC_RECV, 702);

	/* Posting to a QP in RESET, then INIT. */
	struct ibv_cq *cq = ibv_create_cq(A->ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qp = make_qp(A, cq, cq, NULL, 0);
	if (!qp)
		fatal("create QP for state checks");
	check(qp->state == IBV_QPS_RESET, "new QP is in RESET", "state %d", qp->state);
	rc = post_one(qp, 84, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 8, 0, 0, 0);
	check(rc == EINVAL, "post_send in RESET: EINVAL", "rc %d", rc);
	rc = post_recv(qp, 703, A, 0, 8);
	check(rc == EINVAL, "post_recv in RESET: EINVAL", "rc %d", rc);

	/* Missing required attributes. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1 };
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
	check(rc == EINVAL && qp->state == IBV_QPS_RESET, "modify_qp RESET->INIT without ACCESS_FLAGS: EINVAL",
	      "rc %d", rc);
	check(to_init(qp) == 0 && qp->state == IBV_QPS_INIT, "modify_qp RESET->INIT", "state %d", qp->state);
	rc = post_one(qp, 85, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 8, 0, 0, 0);
	check(rc == EINVAL, "post_send in INIT: EINVAL", "rc %d", rc);
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = A->mtu, .rq_psn = 0, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = 12,
				 .ah_attr = { .is_global = 1, .port_num = 1, .grh = { .dgid = B->gid } } };
	rc = ibv_modify_qp(qp, &r,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	check(rc == EINVAL && qp->state == IBV_QPS_INIT, "modify_qp INIT->RTR without DEST_QPN: EINVAL", "rc %d",
	      rc);
	struct ibv_qp_attr s = { .qp_state = IBV_QPS_RTS };
	rc = ibv_modify_qp(qp, &s, IBV_QP_STATE);
	check(rc == EINVAL, "modify_qp INIT->RTS (skipping RTR): EINVAL", "rc %d", rc);

	/* Destroying a CQ a QP uses. */
	rc = ibv_destroy_cq(cq);
	check(rc == EBUSY, "ibv_destroy_cq while a QP uses it: EBUSY", "rc %d", rc);
	check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0, "destroy the QP, then its CQ", "");

	/* A CQ of another context. */
	struct ibv_cq *other = ibv_create_cq(B->ctx, 16, NULL, NULL, 0);
	struct ibv_cq *mine = ibv_create_cq(A->ctx, 16, NULL, NULL, 0);
	errno = 0;
	qp = make_qp(A, mine, other, NULL, 0);
	check(qp == NULL && errno == EINVAL, "ibv_create_qp with a CQ of another context: NULL, EINVAL",
	      "qp %p errno %d", (void *)qp, errno);

	/* UD */
	struct ibv_qp_init_attr ud = { .send_cq = mine, .recv_cq = mine,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1 },
				       .qp_type = IBV_QPT_UD };
	errno = 0;
	qp = ibv_create_qp(A->pd, &ud);
	check(qp == NULL && errno == EOPNOTSUPP, "ibv_create_qp UD: NULL, EOPNOTSUPP", "qp %p errno %d",
	      (void *)qp, errno);
	check(ibv_destroy_cq(other) == 0 && ibv_destroy_cq(mine) == 0, "destroy the spare CQs", "");

	/* A PD an MR uses. */
	struct ibv_pd *pd = ibv_alloc_pd(A->ctx);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, A->buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	rc = mr ? ibv_dealloc_pd(pd) : -1;
	check(rc == EBUSY, "ibv_dealloc_pd while an MR uses it: EBUSY", "rc %d", rc);
	check(mr && ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "dereg the MR, then dealloc its PD", "");

	/* REMOTE_WRITE without LOCAL_WRITE: the constant-flags inline and the iova2 path. */
	errno = 0;
	mr = ibv_reg_mr(A->pd, A->buf, 4096, IBV_ACCESS_REMOTE_WRITE);
	check(mr == NULL && errno == EINVAL, "ibv_reg_mr REMOTE_WRITE without LOCAL_WRITE: NULL, EINVAL",
	      "mr %p errno %d", (void *)mr, errno);
	volatile int flags = IBV_ACCESS_REMOTE_ATOMIC;
	errno = 0;
	mr = ibv_reg_mr(A->pd, A->buf, 4096, flags);
	check(mr == NULL && errno == EINVAL, "ibv_reg_mr REMOTE_ATOMIC without LOCAL_WRITE (iova2): NULL, EINVAL",
	      "mr %p errno %d", (void *)mr, errno);

	/* The extended verbs this device lacks, through the inlines. */
	struct ibv_cq_init_attr_ex cqx = { .cqe = 16 };
	errno = 0;
	struct ibv_cq_ex *cq_ex = ibv_create_cq_ex(A->ctx, &cqx);
	check(cq_ex == NULL && errno == EOPNOTSUPP, "ibv_create_cq_ex: NULL, EOPNOTSUPP", "%p errno %d",
	      (void *)cq_ex, errno);
	check(ibv_qp_to_qp_ex(p->a) == NULL, "ibv_qp_to_qp_ex: NULL", "");
}

/* A wrong lkey: completes with a local protection error, then the QP is in
 * error and every later WR flushes. */
static void test_bad_lkey(void)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	struct pair p = new_pair("lkey pair", NULL, 0);

	post_recv(p.b, 800, B, 0, 100);
	struct ibv_sge sge = { .addr = (uintptr_t)A->buf, .length = 16, .lkey = A->mr->lkey ^ 0x5a5a00 };
	struct ibv_send_wr wr = { .wr_id = 90, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	int rc = ibv_post_send(p.a, &wr, &bad);
	check(rc == 0, "wrong lkey: the post is accepted", "rc %d", rc);
	expect_wc(p.acq, &wc, "wrong lkey: IBV_WC_LOC_PROT_ERR", IBV_WC_LOC_PROT_ERR, -1, 90);
	check(wc.qp_num == p.a->qp_num, "wrong lkey: qp_num", "%u", wc.qp_num);

	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	rc = ibv_query_qp(p.a, &qa, IBV_QP_STATE, &qia);
	check(rc == 0 && qa.qp_state == IBV_QPS_ERR, "wrong lkey: the QP is in ERR", "rc %d state %d", rc,
	      qa.qp_state);
	rc = post_one(p.a, 91, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 8, 0, 0, 0);
	if (rc == 0)
		expect_wc(p.acq, &wc, "wrong lkey: a later WR flushes", IBV_WC_WR_FLUSH_ERR, -1, 91);
	else
		check(0, "wrong lkey: a later WR flushes", "post returned %d", rc);
	rc = post_recv(p.a, 92, A, 0, 8);
	if (rc == 0)
		expect_wc(p.acq, &wc, "wrong lkey: a later receive flushes", IBV_WC_WR_FLUSH_ERR, -1, 92);
	else
		check(0, "wrong lkey: a later receive flushes", "post returned %d", rc);
	free_pair(&p, "lkey pair: destroy");
}

/* RDMA WRITE to an rkey without REMOTE_WRITE: the sender sees a remote access error. */
static void test_remote_access(void)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	struct pair p = new_pair("rkey pair", NULL, 0);
	struct ibv_mr *ro = ibv_reg_mr(B->pd, B->buf + 3 * MIB, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!check(ro != NULL, "ibv_reg_mr LOCAL_WRITE|REMOTE_READ", "errno %d", errno))
		return;
	memset(B->buf + 3 * MIB, 0x11, 64);
	int rc = post_one(p.a, 95, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, A, 0, 64, (uintptr_t)B->buf + 3 * MIB,
			  ro->rkey, 0);
	check(rc == 0, "remote access: post", "rc %d", rc);
	expect_wc(p.acq, &wc, "remote access: WRITE without REMOTE_WRITE completes IBV_WC_REM_ACCESS_ERR",
		  IBV_WC_REM_ACCESS_ERR, -1, 95);
	check(B->buf[3 * MIB] == 0x11 && B->buf[3 * MIB + 63] == 0x11, "remote access: target untouched", "");
	check(ibv_dereg_mr(ro) == 0, "ibv_dereg_mr", "");
	free_pair(&p, "rkey pair: destroy");
}

/* An atomic at an address that is not 8-byte aligned: refused at post
 * with EINVAL (as rxe's provider does), *bad_wr on it, the target
 * untouched and the QP still usable. */
static void test_misaligned_atomic(struct pair *p)
{
	struct side *B = &S[1];
	struct ibv_wc wc;
	uint64_t *target = (uint64_t *)(B->buf + 800000);
	target[0] = target[1] = 0;
	struct ibv_sge sge = { .addr = (uintptr_t)(S[0].buf + 800000), .length = 8, .lkey = S[0].mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 96, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	wr.wr.atomic.remote_addr = (uintptr_t)B->buf + 800004;
	wr.wr.atomic.rkey = B->mr->rkey;
	wr.wr.atomic.compare_add = 1;
	int rc = ibv_post_send(p->a, &wr, &bad);
	check(rc == EINVAL && bad == &wr, "misaligned atomic: EINVAL at post, *bad_wr on it", "rc %d", rc);
	expect_empty(p->acq, "misaligned atomic: no completion", 30);
	check(target[0] == 0 && target[1] == 0, "misaligned atomic: target untouched", "");
	check(post_atomic(p->a, 98, IBV_WR_ATOMIC_FETCH_AND_ADD, 800000, (uintptr_t)target, B->mr->rkey, 3, 0) == 0,
	      "misaligned atomic: an aligned one after it posts", "");
	if (expect_wc(p->acq, &wc, "misaligned atomic: an aligned one after it completes", IBV_WC_SUCCESS,
		      IBV_WC_FETCH_ADD, 98))
		check(target[0] == 3, "misaligned atomic: the aligned one added", "%llu",
		      (unsigned long long)target[0]);
}

/* An RDMA READ into local memory registered without LOCAL_WRITE: a local
 * protection error, and the local bytes are untouched. */
static void test_read_into_readonly(void)
{
	struct side *A = &S[0], *B = &S[1];
	struct ibv_wc wc;
	struct pair p = new_pair("read-only pair", NULL, 0);
	struct ibv_mr *ro = ibv_reg_mr(A->pd, A->buf + 3 * MIB, 4096, 0);
	if (!check(ro != NULL, "ibv_reg_mr with no access flags (local read only)", "errno %d", errno))
		return;
	memset(A->buf + 3 * MIB, 0x22, 64);
	fill(B->buf + 810000, 64, 18);
	struct ibv_sge sge = { .addr = (uintptr_t)A->buf + 3 * MIB, .length = 64, .lkey = ro->lkey };
	struct ibv_send_wr wr = { .wr_id = 97, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	wr.wr.rdma.remote_addr = (uintptr_t)B->buf + 810000;
	wr.wr.rdma.rkey = B->mr->rkey;
	int rc = ibv_post_send(p.a, &wr, &bad);
	check(rc == 0, "READ into a read-only MR: post", "rc %d", rc);
	expect_wc(p.acq, &wc, "READ into a read-only MR: IBV_WC_LOC_PROT_ERR", IBV_WC_LOC_PROT_ERR, -1, 97);
	check(A->buf[3 * MIB] == 0x22 && A->buf[3 * MIB + 63] == 0x22, "READ into a read-only MR: untouched", "");
	check(ibv_dereg_mr(ro) == 0, "ibv_dereg_mr", "");
	free_pair(&p, "read-only pair: destroy");

	/* A receive into memory without LOCAL_WRITE: the receiver completes
	 * with a local error and its bytes stay; the sender fails too. */
	p = new_pair("read-only receive pair", NULL, 0);
	ro = ibv_reg_mr(B->pd, B->buf + 3 * MIB, 4096, 0);
	if (!check(ro != NULL, "ibv_reg_mr with no access flags (receiver)", "errno %d", errno))
		return;
	memset(B->buf + 3 * MIB, 0x33, 64);
	struct ibv_sge rs = { .addr = (uintptr_t)B->buf + 3 * MIB, .length = 64, .lkey = ro->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 850, .sg_list = &rs, .num_sge = 1 }, *rbad = NULL;
	rc = ibv_post_recv(p.b, &rwr, &rbad);
	check(rc == 0, "RECV into a read-only MR: post_recv", "rc %d", rc);
	fill(A->buf, 64, 19);
	check(post_one(p.a, 99, IBV_WR_SEND, IBV_SEND_SIGNALED, A, 0, 64, 0, 0, 0) == 0,
	      "RECV into a read-only MR: post_send", "");
	/* rxe says LOC_QP_OP_ERR (its copy into the WQE fails), other devices
	 * LOC_PROT_ERR: either is a local error the program can see. */
	int n = wait_wc(p.bcq, &wc, 5000);
	check(n == 1 && wc.wr_id == 850 &&
		      (wc.status == IBV_WC_LOC_PROT_ERR || wc.status == IBV_WC_LOC_QP_OP_ERR),
	      "RECV into a read-only MR: a local error at the receiver", "n %d status %s", n,
	      ibv_wc_status_str(wc.status));
	n = wait_wc(p.acq, &wc, 5000);
	check(n == 1 && wc.wr_id == 99 && wc.status != IBV_WC_SUCCESS, "RECV into a read-only MR: the sender fails",
	      "n %d status %s", n, ibv_wc_status_str(wc.status));
	check(B->buf[3 * MIB] == 0x33 && B->buf[3 * MIB + 63] == 0x33, "RECV into a read-only MR: untouched", "");
	check(ibv_dereg_mr(ro) == 0, "ibv_dereg_mr", "");
	free_pair(&p, "read-only receive pair: destroy");
}

int main(void)
{
	setenv("RCTB_IBV_ADDR", "127.0.0.1,127.0.0.2", 0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	read_addrs();

	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		fatal("ibv_get_device_list");
	test_devices(list, n);
	for (int i = 0; i < 2; i++) {
		S[i].ctx = ibv_open_device(list[i]);
		if (!S[i].ctx)
			fatal("ibv_open_device");
		check(S[i].ctx->device == list[i] && S[i].ctx->num_comp_vectors >= 1 && S[i].ctx->async_fd >= 0,
		      "ibv_open_device", "");
		test_queries(&S[i], i, ibv_get_device_guid(list[i]));
		S[i].pd = ibv_alloc_pd(S[i].ctx);
		if (!S[i].pd)
			fatal("ibv_alloc_pd");
		if (posix_memalign((void **)&S[i].buf, 4096, BUF_SIZE))
			fatal("posix_memalign");
		memset(S[i].buf, 0, BUF_SIZE);
		S[i].mr = ibv_reg_mr(S[i].pd, S[i].buf, BUF_SIZE, ACCESS_ALL);
		if (!S[i].mr)
			fatal("ibv_reg_mr");
		check(S[i].mr->addr == S[i].buf && S[i].mr->length == BUF_SIZE && S[i].mr->pd == S[i].pd,
		      "ibv_reg_mr: addr, length, pd", "");
	}

	struct pair p = new_pair("main pair", NULL, 64);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	int rc = ibv_query_qp(p.a, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_CAP | IBV_QP_PATH_MTU | IBV_QP_SQ_PSN,
			      &qia);
	check(rc == 0 && qa.qp_state == IBV_QPS_RTS && qa.dest_qp_num == p.b->qp_num && qia.qp_type == IBV_QPT_RC,
	      "ibv_query_qp: RTS, dest_qp_num", "rc %d state %d dest %u", rc, qa.qp_state, qa.dest_qp_num);
	check(qa.path_mtu == S[0].mtu && qa.sq_psn == 0x2000 && qa.cap.max_inline_data >= 64 &&
		      qia.cap.max_inline_data >= 64 && qia.send_cq == p.acq,
	      "ibv_query_qp: path_mtu, sq_psn, max_inline_data, send_cq", "mtu %d psn %x inline %u/%u", qa.path_mtu,
	      qa.sq_psn, qa.cap.max_inline_data, qia.cap.max_inline_data);

	test_send(&p);
	test_rdma(&p);
	test_atomics(&p);
	test_misaligned_atomic(&p);
	test_large_and_sges(&p);
	test_inline(&p);
	test_unsignaled(&p);
	test_rnr(&p);
	test_sig_all();
	test_srq();
	test_channel();
	test_errors(&p);
	test_bad_lkey();
	test_remote_access();
	test_read_into_readonly();
	free_pair(&p, "main pair: destroy");

	for (int i = 0; i < 2; i++) {
		int r1 = ibv_dereg_mr(S[i].mr), r2 = ibv_dealloc_pd(S[i].pd), r3 = ibv_close_device(S[i].ctx);
		check(!r1 && !r2 && !r3, "dereg, dealloc, close", "%d %d %d", r1, r2, r3);
		free(S[i].buf);
	}
	ibv_free_device_list(list);

	printf("# verbs_test: %d checks, %d failed\n", n_checks, n_failed);
	return n_failed ? 1 : 0;
}
