// A cgo program linked as versitygw's rdma/rcserver binding links
// librcserver.a (its #cgo LDFLAGS libraries), calling it as that binding
// does: init, the log sink and terminal notification as exported Go
// functions, PREPARE with op > 1 on a bogus server (versitygw's own test),
// a control-plane-only PUT (client QPN 0) through READY, the PUT view, and
// destroy. tests/run.sh lays it out with the archive in lib/ and the header
// in include/, builds it with `go build` and runs it on a device
// of rctb's libibverbs.so.1. Exit 0 and "ok" when every step did what the
// ABI says.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/include
#cgo LDFLAGS: -L${SRCDIR}/lib -l:librcserver.a -lstdc++ -ldl -lpthread
#include <stdlib.h>
#include <string.h>
#include "rc_server_abi.h"

extern void goLog(void *ctx, int level, char *msg, char *file, int line);
extern void goTerminal(void *ctx, char *id, int outcome, uint64_t bytes);

static void log_trampoline(void *ctx, int level, const char *msg, const char *file, int line) {
	goLog(ctx, level, (char *)msg, (char *)file, line);
}
static void terminal_trampoline(void *ctx, const char *id, int outcome, uint64_t bytes) {
	goTerminal(ctx, (char *)id, outcome, bytes);
}
static void install_hooks(rc_server *srv) {
	rc_server_set_log_sink(srv, log_trampoline, NULL);
	rc_server_set_terminal_notify(srv, terminal_trampoline, NULL);
}
static rc_server *bogus(void) { return (rc_server *)(uintptr_t)0x10; }
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

var (
	mu    sync.Mutex
	ended = map[string]int{}
	logs  int
)

//export goLog
func goLog(ctx unsafe.Pointer, level C.int, msg *C.char, file *C.char, line C.int) {
	mu.Lock()
	logs++
	mu.Unlock()
}

//export goTerminal
func goTerminal(ctx unsafe.Pointer, id *C.char, outcome C.int, bytes C.uint64_t) {
	mu.Lock()
	ended[C.GoString(id)]++
	mu.Unlock()
}

func str(s string) (C.rc_str_in, func()) {
	if s == "" {
		return C.rc_str_in{}, func() {}
	}
	p := C.CString(s)
	return C.rc_str_in{ptr: p, len: C.uint32_t(len(s))}, func() { C.free(unsafe.Pointer(p)) }
}

func check(what string, got, want C.int) {
	if got != want {
		fmt.Printf("FAIL %s = %d, want %d\n", what, got, want)
		os.Exit(1)
	}
}

func main() {
	var req C.rc_prepare_req
	var resp C.rc_prepare_resp
	req.op = 2
	req.size = 1
	check("rc_prepare(bogus server, op 2)", C.rc_prepare(C.bogus(), &req, &resp), C.RC_E_ARG)

	var opts C.rc_device_opts
	opts.gid_index = -1
	opts.max_sessions = 4
	opts.max_user_sessions = 4
	opts.max_staging_bytes = 1 << 20
	opts.max_user_staging_bytes = 1 << 20
	opts.max_qps = 4
	var srv *C.rc_server
	check("rc_server_init", C.rc_server_init(&opts, &srv), C.RC_OK)
	C.install_hooks(srv)

	target, free1 := str("/bucket/key")
	defer free1()
	req = C.rc_prepare_req{op: 1, target: target, size: 4096, client_psn: 7, cookie: 0xC0FFEE}
	for i := range req.principal.id {
		req.principal.id[i] = 9
	}
	check("rc_prepare", C.rc_prepare(srv, &req, &resp), C.RC_OK)
	id := C.GoStringN(&resp.session_id[0], C.int(resp.session_len))
	sid, free2 := str(id)
	defer free2()
	check("rc_finish_prepare", C.rc_finish_prepare(srv, sid, 1), C.RC_OK)
	ready := C.rc_ready_req{principal: req.principal, session_id: sid, cookie: 0xC0FFEE}
	var rresp C.rc_ready_resp
	check("rc_ready_transfer", C.rc_ready_transfer(srv, &ready, &rresp), C.RC_OK)
	if rresp.outcome != C.RC_READY_OK || rresp.bytes_transferred != 4096 {
		fmt.Printf("FAIL READY: outcome %d, %d bytes\n", rresp.outcome, rresp.bytes_transferred)
		os.Exit(1)
	}
	var view C.rc_put_view
	check("rc_get_put_data", C.rc_get_put_data(srv, sid, &view), C.RC_OK)
	check("rc_get_put_data again", C.rc_get_put_data(srv, sid, &view), C.RC_E_DOUBLE)
	etag, free3 := str("etag")
	defer free3()
	check("rc_finish_put", C.rc_finish_put(srv, view, 1, etag, C.rc_str_in{}), C.RC_OK)
	check("rc_finish_put again", C.rc_finish_put(srv, view, 1, etag, C.rc_str_in{}), C.RC_E_STALE)
	C.rc_cancel_all(srv)
	C.rc_server_destroy(srv)
	mu.Lock()
	defer mu.Unlock()
	if len(ended) != 1 || ended[id] != 1 || logs == 0 {
		fmt.Printf("FAIL terminal notifications %v, %d log lines\n", ended, logs)
		os.Exit(1)
	}
	fmt.Printf("ok: versitygw's cgo line links librcserver.a; session %s ended once, %d log lines\n", id, logs)
}
