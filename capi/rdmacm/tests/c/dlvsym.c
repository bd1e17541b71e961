/* Loads librdmacm.so.1 as a dlopen user does: by name, then every public
 * name by name and version node with dlvsym, from the list given as the
 * argument (tests/symbols.txt: "name node" per line). A name bound to the
 * wrong node, or exported without a version, is NULL here. Run with
 * LD_LIBRARY_PATH at rctb's library; prints one line per check and exits
 * non-zero on a failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int n_checks, n_failed;

static void check(int cond, const char *name, const char *why)
{
	n_checks++;
	if (cond) {
		printf("ok - %s\n", name);
	} else {
		n_failed++;
		printf("not ok - %s: %s\n", name, why);
	}
}

int main(int argc, char **argv)
{
	char line[256], sym[128], node[64], name[256];

	if (argc != 2) {
		fprintf(stderr, "usage: %s symbols.txt\n", argv[0]);
		return 2;
	}
	FILE *list = fopen(argv[1], "r");
	if (!list) {
		perror(argv[1]);
		return 2;
	}

	void *h = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);
	check(h != NULL, "dlopen(\"librdmacm.so.1\")", h ? "" : dlerror());
	if (!h)
		return 1;

	/* The library loaded must be rctb's, not the system's. */
	void *marker = dlsym(h, "rdma_create_event_channel");
	Dl_info info;
	int ours = marker && dladdr(marker, &info) && info.dli_fname && strstr(info.dli_fname, "rctb-verbs");
	check(ours, "dlopen found rctb's library (LD_LIBRARY_PATH)", marker ? info.dli_fname : "no symbol");

	while (fgets(line, sizeof(line), list)) {
		if (line[0] == '#' || sscanf(line, "%127s %63s", sym, node) != 2)
			continue;
		snprintf(name, sizeof(name), "dlvsym(%s, %s)", sym, node);
		check(dlvsym(h, sym, node) != NULL, name, "NULL");
	}
	fclose(list);

	/* A node the name is not bound to finds nothing. */
	check(dlvsym(h, "rdma_establish", "RDMACM_1.0") == NULL, "dlvsym(rdma_establish, RDMACM_1.0) is NULL",
	      "found under the wrong node");

	/* And what dlvsym found is the function. */
	typedef const char *(*event_str_fn)(int);
	event_str_fn event_str = (event_str_fn)dlvsym(h, "rdma_event_str", "RDMACM_1.0");
	const char *s = event_str ? event_str(9) : NULL;
	check(s && !strcmp(s, "RDMA_CM_EVENT_ESTABLISHED"), "dlvsym'd rdma_event_str(9) is RDMA_CM_EVENT_ESTABLISHED",
	      s ? s : "no function");

	dlclose(h);
	printf("# dlvsym: %d checks, %d failed\n", n_checks, n_failed);
	return n_failed ? 1 : 0;
}
