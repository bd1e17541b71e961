/*
 * rc_server_abi.h: the C interface of rctb's librcserver.a, the RC session
 * server of rctb-rcsession. Written for rctb from versitygw's rcserver ABI
 * (names, signatures, struct layouts and constants match it on x86_64, so
 * versitygw's cgo binding links this library unchanged).
 *
 * Every int function returns an RC_* status. Arguments are checked before
 * the server is touched. No call unwinds into C: an internal failure is
 * RC_E_INTERNAL. Strings passed in (rc_str_in) are borrowed for the call
 * only; {NULL, 0} is the empty string. Strings passed out are fixed fields
 * with a length, NUL-terminated when there is room.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef RCTB_RC_SERVER_ABI_H
#define RCTB_RC_SERVER_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define RC_OK            0  /* success */
#define RC_E_ARG         1  /* an argument broke a rule */
#define RC_E_STATE       2  /* not valid in the session's state; session kept */
#define RC_E_SESSION     3  /* another principal's session, or a wrong cookie */
#define RC_E_STALE       4  /* unknown or spent handle; session past this step */
#define RC_E_NO_SESSION  5  /* no session has this id */
#define RC_E_DOUBLE      6  /* the lease or view is already out */
#define RC_E_WIRE        7  /* the data phase failed on the wire */
#define RC_E_SHORT       8  /* staged bytes differ from the session's size */
#define RC_E_TRUNC       9  /* a string is longer than its field */
#define RC_E_LIMIT      10  /* a session, resource or slot limit */
#define RC_E_INTERNAL   11  /* anything else */

/* READY outcomes (rc_ready_resp.outcome, terminal notification). */
#define RC_READY_OK           0
#define RC_READY_BUSY         1  /* the client was not ready: READY may be retried */
#define RC_READY_TIMEOUT      2
#define RC_READY_VERIFY_FAIL  3
#define RC_READY_WIRE_FAIL    4

/* OR-ed into rc_session_snapshot.state for a session marked for reaping. */
#define RC_SNAPSHOT_REAP_PENDING 0x80

typedef struct rc_server rc_server;

typedef struct {
    const char *ptr;
    uint32_t len;
} rc_str_in;

/* level 0: error, 2: debug. msg and file live for the call only. */
typedef void (*rc_log_fn)(void *ctx, int level, const char *msg, const char *file, int line);
/* Once per session, when it is destroyed; id lives for the call only. */
typedef void (*rc_terminal_fn)(void *ctx, const char *id, int outcome, uint64_t bytes);

typedef struct {
    const char *gid_hint;          /* NULL: first device; IPv4 or hex GID (prefix) */
    uint8_t port;                  /* 0 is port 1 */
    int gid_index;                 /* < 0: the entry gid_hint matched */
    uint32_t max_sessions;         /* 0 refuses every PREPARE */
    uint32_t max_user_sessions;
    uint64_t max_staging_bytes;
    uint64_t max_user_staging_bytes;
    uint32_t max_qps;
    uint32_t max_user_qps;         /* 0: no limit */
    uint64_t t_prep_ms;            /* PREPARE -> READY; 0: none */
    uint64_t t_exec_ms;            /* READY -> finished; 0: none */
    uint32_t max_ready_slots;      /* 0: 64 */
    uint32_t max_stage_slots;      /* 0: 32 */
} rc_device_opts;

typedef struct {
    uint8_t id[32];                /* SHA-256 of the principal */
} rc_principal_id;

typedef struct {
    uint64_t session_epoch;
    uint64_t nonce;                /* 0 is never valid */
} rc_handle;

typedef struct {
    rc_principal_id principal;
    uint8_t op;                    /* 0 GET, 1 PUT */
    rc_str_in target;              /* at most 2047 bytes */
    uint64_t offset;
    uint64_t size;                 /* 1 .. 0x7fffffff, offset + size too */
    uint32_t client_psn;           /* 24 bits */
    uint32_t cookie;
    rc_str_in client_token;        /* 88 hex (optionally :addr:size); empty or zeros: loopback */
} rc_prepare_req;

typedef struct {
    char session_id[33];           /* 32 lowercase hex, NUL */
    uint32_t session_len;
    uint32_t server_qpn;
    uint32_t server_psn;
    uint64_t staging_addr;
    uint32_t staging_rkey;
    char reply_token[88];          /* not NUL-terminated */
    uint32_t reply_len;
} rc_prepare_resp;

typedef struct {
    uint8_t *buf;                  /* the server's memory, until returned */
    size_t capacity;
    rc_handle handle;
} rc_staging_lease;

typedef struct {
    rc_handle handle;
    const uint8_t *buf;            /* the server's memory, until returned */
    size_t len;
} rc_put_view;

typedef struct {
    rc_principal_id principal;
    rc_str_in session_id;
    uint32_t cookie;
    uint32_t client_qpn;           /* 0: control plane only, no data moves */
    uint64_t client_mr_addr;       /* 0: the one from the PREPARE token */
    uint32_t client_mr_rkey;       /* 0: the one from the PREPARE token */
} rc_ready_req;

typedef struct {
    uint64_t bytes_transferred;
    uint32_t cookie_echo;
    int32_t outcome;
    char etag[128];
    uint32_t etag_len;
    char version_id[128];
    uint32_t version_len;
} rc_ready_resp;

typedef struct {
    char target[2048];
    uint32_t target_len;
    uint8_t op;
} rc_session_info_resp;

typedef struct {
    char session_id[33];
    char op[4];                    /* "GET" or "PUT" */
    char target[2048];
    uint32_t target_len;
    uint8_t state;                 /* 0 prepared, 1 published, 2 transferring, 3 completing; | 0x80 */
    uint64_t age_ms;
    uint64_t staging_bytes;
} rc_session_snapshot;

typedef void (*rc_snapshot_cb)(const rc_session_snapshot *rec, void *ctx);

int rc_server_init(const rc_device_opts *opts, rc_server **out);
void rc_server_destroy(rc_server *srv);
void rc_server_set_log_sink(rc_server *srv, rc_log_fn fn, void *ctx);
void rc_server_set_terminal_notify(rc_server *srv, rc_terminal_fn fn, void *ctx);
int rc_server_sessions_snapshot(rc_server *srv, rc_snapshot_cb cb, void *ctx);

int rc_prepare(rc_server *srv, const rc_prepare_req *req, rc_prepare_resp *resp);
int rc_finish_prepare(rc_server *srv, rc_str_in session_id, int prepare_committed);
int rc_borrow_staging(rc_server *srv, rc_str_in session_id, rc_staging_lease *lease);
int rc_finish_staging(rc_server *srv, rc_staging_lease lease, int ok, size_t written,
                      rc_str_in etag, rc_str_in version_id);
int rc_session_info(rc_server *srv, rc_str_in session_id, rc_principal_id who,
                    rc_session_info_resp *out);
int rc_ready_transfer(rc_server *srv, const rc_ready_req *req, rc_ready_resp *resp);
int rc_get_put_data(rc_server *srv, rc_str_in session_id, rc_put_view *view);
int rc_finish_put(rc_server *srv, rc_put_view view, int committed,
                  rc_str_in etag, rc_str_in version_id);
int rc_finish_final(rc_server *srv, rc_str_in session_id);
int rc_cancel(rc_server *srv, rc_str_in session_id, rc_principal_id who);

int rc_try_acquire_ready(rc_server *srv);
void rc_release_ready(rc_server *srv);
int rc_try_acquire_stage(rc_server *srv);
void rc_release_stage(rc_server *srv);
void rc_cancel_all(rc_server *srv);

#ifdef __cplusplus
}
#endif

#endif
