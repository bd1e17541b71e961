/* A program linked against librdmacm (-lrdmacm, the system's headers) and
 * run on rctb's librdmacm.so.1 (LD_LIBRARY_PATH): what works works, and
 * what is not implemented yet fails cleanly, with the documented return
 * value and errno, never an abort.
 *
 * Real: rdma_event_str, rdma_get_src_port/rdma_get_dst_port, event
 * channels (a pollable fd, close-on-exec; rdma_get_cm_event on an empty
 * channel blocks until a signal, or fails with EAGAIN when non-blocking),
 * ids and their argument checks, rdma_getaddrinfo, rdma_get_devices.
 * Refused for good: UD port spaces, IPv6, multicast (EOPNOTSUPP);
 * rsockets (ENOSYS, with 64-bit -1 where the type is). Connections
 * between two processes are tests/programs.sh's (rping, ucmatose, ...).
 * Prints one line per check and exits non-zero on a failure. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

static int n_checks, n_failed;

static void check(int cond, const char *what, const char *detail)
{
	n_checks++;
	if (cond) {
		printf("ok - %s\n", what);
	} else {
		n_failed++;
		printf("not ok - %s (%s)\n", what, detail);
	}
}

/* A call returned `ret` (as a long) with errno `err`: it must be `want`
 * with errno `want_errno`. */
static void check_fails(const char *what, long ret, int err, long want, int want_errno)
{
	char detail[160];
	snprintf(detail, sizeof(detail), "returned %ld errno %d (%s); want %ld errno %d (%s)", ret, err, strerror(err),
		 want, want_errno, strerror(want_errno));
	check(ret == want && err == want_errno, what, detail);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_alarm(int sig)
{
	(void)sig;
}

static void event_channel(void)
{
	struct rdma_cm_event *ev = NULL;
	long r;
	int e;

	struct rdma_event_channel *ch = rdma_create_event_channel();
	check(ch != NULL, "rdma_create_event_channel", strerror(errno));
	if (!ch)
		return;
	int fd = ch->fd;
	check(fd >= 0, "the channel's fd is open", "negative fd");
	check((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0, "the channel's fd is close-on-exec", "no FD_CLOEXEC");

	struct pollfd p = { .fd = fd, .events = POLLIN };
	check(poll(&p, 1, 50) == 0, "poll on an empty channel times out", "ready");

	/* Non-blocking: EAGAIN at once. */
	int flags = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	errno = 0;
	r = rdma_get_cm_event(ch, &ev);
	e = errno;
	check_fails("rdma_get_cm_event, non-blocking, empty: -1 EAGAIN", r, e, -1, EAGAIN);
	check(ev == NULL, "  and hands out no event", "event set");

	/* Blocking: it waits until a signal interrupts it (no SA_RESTART). */
	fcntl(fd, F_SETFL, flags);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { .it_value = { .tv_sec = 0, .tv_usec = 200000 } };
	double t0 = now();
	setitimer(ITIMER_REAL, &it, NULL);
	errno = 0;
	r = rdma_get_cm_event(ch, &ev);
	e = errno;
	double waited = now() - t0;
	check_fails("rdma_get_cm_event, blocking, empty, interrupted: -1 EINTR", r, e, -1, EINTR);
	char detail[64];
	snprintf(detail, sizeof(detail), "returned after %.3f s", waited);
	check(waited >= 0.15, "  after blocking until the signal (200 ms)", detail);

	errno = 0;
	r = rdma_get_cm_event(NULL, &ev);
	check_fails("rdma_get_cm_event(NULL): -1 EINVAL", r, errno, -1, EINVAL);
	errno = 0;
	r = rdma_get_cm_event(ch, NULL);
	check_fails("rdma_get_cm_event(ch, NULL): -1 EINVAL", r, errno, -1, EINVAL);
	errno = 0;
	r = rdma_ack_cm_event(NULL);
	check_fails("rdma_ack_cm_event(NULL): -1 EINVAL", r, errno, -1, EINVAL);

	/* An id on the channel, and the port spaces this RC device refuses. */
	struct rdma_cm_id *id = NULL;
	errno = 0;
	r = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	check(r == 0 && id != NULL && id->channel == ch, "rdma_create_id(RDMA_PS_TCP) on the channel", strerror(errno));
	errno = 0;
	r = rdma_resolve_route(id, 2000);
	check_fails("rdma_resolve_route before rdma_resolve_addr: -1 EINVAL", r, errno, -1, EINVAL);
	errno = 0;
	r = rdma_listen(id, 1);
	check_fails("rdma_listen before rdma_bind_addr: -1 EINVAL", r, errno, -1, EINVAL);
	struct sockaddr_in6 six;
	memset(&six, 0, sizeof(six));
	six.sin6_family = AF_INET6;
	errno = 0;
	r = rdma_bind_addr(id, (struct sockaddr *)&six);
	check_fails("rdma_bind_addr(IPv6): -1 EAFNOSUPPORT (IPv4 only)", r, errno, -1, EAFNOSUPPORT);
	struct sockaddr_in other;
	memset(&other, 0, sizeof(other));
	other.sin_family = AF_INET;
	other.sin_addr.s_addr = inet_addr("192.0.2.1");
	errno = 0;
	r = rdma_bind_addr(id, (struct sockaddr *)&other);
	check_fails("rdma_bind_addr(an address of no device): -1 EADDRNOTAVAIL", r, errno, -1, EADDRNOTAVAIL);
	check(rdma_destroy_id(id) == 0, "rdma_destroy_id", strerror(errno));
	struct rdma_cm_id *ud = NULL;
	errno = 0;
	r = rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP);
	check_fails("rdma_create_id(RDMA_PS_UDP): -1 EOPNOTSUPP (RC only)", r, errno, -1, EOPNOTSUPP);

	rdma_destroy_event_channel(ch);
	errno = 0;
	check(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "rdma_destroy_event_channel closes the fd", "still open");
	rdma_destroy_event_channel(NULL);
	check(1, "rdma_destroy_event_channel(NULL) is harmless", "");
}

static void not_yet(void)
{
	long r;
	int n = -1;

	struct rdma_addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	errno = 0;
	r = rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res);
	check(r == 0 && res != NULL, "rdma_getaddrinfo(127.0.0.1, 7471)", strerror(errno));
	if (res) {
		struct sockaddr_in *d = (struct sockaddr_in *)res->ai_dst_addr;
		check(res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP &&
			      d != NULL && d->sin_port == htons(7471) && d->sin_addr.s_addr == inet_addr("127.0.0.1"),
		      "  an RC destination 127.0.0.1:7471", "wrong fields");
		rdma_freeaddrinfo(res);
	}
	hints.ai_flags = RAI_PASSIVE;
	res = NULL;
	r = rdma_getaddrinfo(NULL, "7471", &hints, &res);
	check(r == 0 && res && res->ai_src_addr && ((struct sockaddr_in *)res->ai_src_addr)->sin_port == htons(7471),
	      "rdma_getaddrinfo(RAI_PASSIVE): a source address", strerror(errno));
	rdma_freeaddrinfo(res);
	rdma_freeaddrinfo(NULL);

	errno = 0;
	struct ibv_context **devs = rdma_get_devices(&n);
	check(devs != NULL && n == 1 && devs[0] != NULL && devs[1] == NULL, "rdma_get_devices: one device, NULL-terminated",
	      strerror(errno));
	rdma_free_devices(devs);

	errno = 0;
	r = rdma_resolve_addr(NULL, NULL, NULL, 2000);
	check_fails("rdma_resolve_addr(NULL): -1 EINVAL", r, errno, -1, EINVAL);
	errno = 0;
	r = rdma_join_multicast(NULL, NULL, NULL);
	check_fails("rdma_join_multicast: -1 EOPNOTSUPP (RC only)", r, errno, -1, EOPNOTSUPP);

	errno = 0;
	r = rsocket(AF_INET, SOCK_STREAM, 0);
	check_fails("rsocket: -1 ENOSYS", r, errno, -1, ENOSYS);
	char buf[8] = { 0 };
	errno = 0;
	ssize_t s = rsend(3, buf, sizeof(buf), 0);
	check_fails("rsend: (ssize_t)-1 ENOSYS", s, errno, -1, ENOSYS);
	errno = 0;
	size_t w = riowrite(3, buf, sizeof(buf), 0, 0);
	check(w == (size_t)-1 && errno == ENOSYS, "riowrite: (size_t)-1 ENOSYS", strerror(errno));
}

static void real(void)
{
	check(!strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED"),
	      "rdma_event_str(ESTABLISHED)", rdma_event_str(RDMA_CM_EVENT_ESTABLISHED));
	check(!strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT"),
	      "rdma_event_str(TIMEWAIT_EXIT)", rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT));
	check(!strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT"), "rdma_event_str(99)",
	      rdma_event_str((enum rdma_cm_event_type)99));

	/* The ports of an id's addresses, read where the header puts them. */
	struct rdma_cm_id id;
	memset(&id, 0, sizeof(id));
	id.route.addr.src_sin.sin_family = AF_INET;
	id.route.addr.src_sin.sin_port = htons(7471);
	id.route.addr.dst_sin6.sin6_family = AF_INET6;
	id.route.addr.dst_sin6.sin6_port = htons(4791);
	check(rdma_get_src_port(&id) == htons(7471), "rdma_get_src_port (IPv4)", "wrong port");
	check(rdma_get_dst_port(&id) == htons(4791), "rdma_get_dst_port (IPv6)", "wrong port");
	id.route.addr.src_sin.sin_family = AF_UNSPEC;
	check(rdma_get_src_port(&id) == 0, "rdma_get_src_port (no address): 0", "not 0");
}

int main(void)
{
	/* The library under test must be rctb's, not the system's. */
	Dl_info info;
	int ours = dladdr((void *)rdma_create_event_channel, &info) && info.dli_fname &&
		   strstr(info.dli_fname, "rctb-verbs");
	check(ours, "rdma_create_event_channel is rctb's (LD_LIBRARY_PATH)", ours ? "" : info.dli_fname);
	if (!ours) {
		printf("# cm_test: not running on rctb's librdmacm.so.1\n");
		return 1;
	}
	real();
	event_channel();
	not_yet();
	printf("# cm_test: %d checks, %d failed\n", n_checks, n_failed);
	return n_failed ? 1 : 0;
}
