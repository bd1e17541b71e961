/* Loads libibverbs.so.1 as NCCL and other dlopen users do: by name, then
 * each verb by name and version node with dlvsym. A name bound to the
 * wrong node, or exported without a version, is NULL here. Run with
 * LD_LIBRARY_PATH at rctb's library (and RCTB_IBV_ADDR as for any
 * program); prints one line per check and exits non-zero on a failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

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

int main(void)
{
	static const struct {
		const char *name, *version;
	} syms[] = {
		{ "ibv_get_device_list", "IBVERBS_1.1" },
		{ "ibv_free_device_list", "IBVERBS_1.1" },
		{ "ibv_get_device_name", "IBVERBS_1.1" },
		{ "ibv_reg_mr_iova2", "IBVERBS_1.8" },
		{ "ibv_create_comp_channel", "IBVERBS_1.0" },
		{ "_ibv_query_gid_ex", "IBVERBS_1.11" },
		{ "ibv_query_gid_type", "IBVERBS_PRIVATE_34" },
	};
	char name[128];

	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	check(h != NULL, "dlopen(\"libibverbs.so.1\")", h ? "" : dlerror());
	if (!h)
		return 1;

	/* The library loaded must be rctb's, not the system's. */
	void *marker = dlsym(h, "ibv_get_device_list");
	Dl_info info;
	int ours = marker && dladdr(marker, &info) && info.dli_fname && strstr(info.dli_fname, "rctb-verbs");
	check(ours, "dlopen found rctb's library (LD_LIBRARY_PATH)", marker ? info.dli_fname : "no symbol");

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		snprintf(name, sizeof(name), "dlvsym(%s, %s)", syms[i].name, syms[i].version);
		void *p = dlvsym(h, syms[i].name, syms[i].version);
		check(p != NULL, name, "NULL");
	}
	/* A node the name is not bound to finds nothing. */
	check(dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.1") == NULL, "dlvsym(ibv_reg_mr_iova2, IBVERBS_1.1) is NULL",
	      "found under the wrong node");

	typedef struct ibv_device **(*get_list_fn)(int *);
	typedef void (*free_list_fn)(struct ibv_device **);
	typedef const char *(*get_name_fn)(struct ibv_device *);
	get_list_fn get_list = (get_list_fn)dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1");
	free_list_fn free_list = (free_list_fn)dlvsym(h, "ibv_free_device_list", "IBVERBS_1.1");
	get_name_fn get_name = (get_name_fn)dlvsym(h, "ibv_get_device_name", "IBVERBS_1.1");
	if (get_list && free_list && get_name) {
		int n = -1;
		struct ibv_device **list = get_list(&n);
		const char *first = list && n > 0 ? get_name(list[0]) : NULL;
		check(first && !strcmp(first, "rctb0"), "dlvsym'd ibv_get_device_list returns rctb0",
		      first ? first : "no device");
		if (list)
			free_list(list);
	} else {
		check(0, "dlvsym'd ibv_get_device_list returns rctb0", "a verb is missing");
	}

	dlclose(h);
	printf("# dlvsym: %d checks, %d failed\n", n_checks, n_failed);
	return n_failed ? 1 : 0;
}
