// A stand-in libcuda.so.1 for the cuda package's tests on machines without
// a GPU. It implements the driver calls the package binds, runs the
// kernels on the CPU from their parameter arrays, and checks what a real
// driver would reject: a context current on the calling thread, device
// ranges inside live allocations, the launch geometry. Hooks named fake_*
// let tests plant faults and count what was left unreleased.
//
// Build: cc -shared -fPIC -O2 -o libcuda.so.1 fakecuda.c -lpthread -lm

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;

enum {
	OK = 0,
	INVALID_VALUE = 1,
	OUT_OF_MEMORY = 2,
	NO_DEVICE = 100,
	INVALID_DEVICE = 101,
	INVALID_CONTEXT = 201,
	INVALID_PTX = 218,
	INVALID_HANDLE = 400,
	NOT_FOUND = 500,
	ILLEGAL_ADDRESS = 700,
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread uintptr_t current;
static int live, devices = 1, launches, last_device = -1;
// uuids[ordinal] is what cuDeviceGetUuid_v2 reports: by default byte 0 is
// 0xA0 + ordinal and the rest 0x11, unless fake_set_uuid sets one.
#define MAXDEV 8
static unsigned char uuids[MAXDEV][16];
static unsigned last_grid;
static char fail_name[64];
static CUresult fail_code;
static int64_t flip_word = -1;
static uint64_t alloc_limit, alloc_bytes;  // 0: no limit

#define MAXALLOC 64
static struct {
	uint64_t ptr, size;
} allocs[MAXALLOC];

// fail returns the planted error for call, once.
static CUresult fail(const char *call) {
	CUresult rc = OK;
	pthread_mutex_lock(&mu);
	if (fail_name[0] && strcmp(fail_name, call) == 0) {
		rc = fail_code;
		fail_name[0] = 0;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

#define ENTER(call)                          \
	do {                                     \
		CUresult rc_ = fail(call);           \
		if (rc_ != OK) return rc_;           \
	} while (0)
#define NEEDCTX()                            \
	do {                                     \
		if (!current) return INVALID_CONTEXT; \
	} while (0)

static void count(int d) {
	pthread_mutex_lock(&mu);
	live += d;
	pthread_mutex_unlock(&mu);
}

// inside reports whether [p, p+n) lies in one live device allocation.
static int inside(uint64_t p, uint64_t n) {
	int ok = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXALLOC; i++) {
		if (allocs[i].ptr && p >= allocs[i].ptr && p + n <= allocs[i].ptr + allocs[i].size) {
			ok = 1;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return ok;
}

void fake_reset(void) {
	pthread_mutex_lock(&mu);
	devices = 1;
	last_device = -1;
	for (int i = 0; i < MAXDEV; i++) {
		memset(uuids[i], 0x11, 16);
		uuids[i][0] = 0xA0 + i;
	}
	fail_name[0] = 0;
	flip_word = -1;
	launches = 0;
	alloc_limit = 0;
	pthread_mutex_unlock(&mu);
}
int fake_live(void) { return live; }
int fake_launches(void) { return launches; }
unsigned fake_last_grid(void) { return last_grid; }
void fake_set_devices(int n) { devices = n < MAXDEV ? n : MAXDEV; }
void fake_set_uuid(int dev, const unsigned char *u) {
	if (dev >= 0 && dev < MAXDEV) memcpy(uuids[dev], u, 16);
}
// fake_last_device is the ordinal whose primary context was retained last.
int fake_last_device(void) { return last_device; }
void fake_flip(int64_t word) { flip_word = word; }
// fake_alloc_limit makes allocations past limit live bytes fail with
// OUT_OF_MEMORY while cuMemGetInfo still reports 512 MiB free, like a GPU
// whose free memory is fragmented or taken by another process.
void fake_alloc_limit(uint64_t limit) {
	pthread_mutex_lock(&mu);
	alloc_limit = limit;
	pthread_mutex_unlock(&mu);
}
void fake_fail(const char *call, int code) {
	pthread_mutex_lock(&mu);
	strncpy(fail_name, call, sizeof fail_name - 1);
	fail_code = code;
	pthread_mutex_unlock(&mu);
}

CUresult cuGetErrorName(CUresult rc, const char **name) {
	switch (rc) {
	case OK: *name = "CUDA_SUCCESS"; return OK;
	case INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return OK;
	case OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
	case NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; return OK;
	case INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; return OK;
	case INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
	case INVALID_PTX: *name = "CUDA_ERROR_INVALID_PTX"; return OK;
	case INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; return OK;
	case NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return OK;
	case ILLEGAL_ADDRESS: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return OK;
	}
	*name = 0;
	return INVALID_VALUE;
}

CUresult cuInit(unsigned flags) {
	ENTER("cuInit");
	if (flags != 0) return INVALID_VALUE;
	return devices > 0 ? OK : NO_DEVICE;
}
CUresult cuDriverGetVersion(int *v) { ENTER("cuDriverGetVersion"); *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { ENTER("cuDeviceGetCount"); *n = devices; return OK; }
CUresult cuDeviceGet(int *dev, int ordinal) {
	ENTER("cuDeviceGet");
	if (ordinal < 0 || ordinal >= devices) return INVALID_DEVICE;
	*dev = ordinal;
	return OK;
}
CUresult cuDeviceGetName(char *name, int n, int dev) {
	ENTER("cuDeviceGetName");
	strncpy(name, "Fake GPU", n);
	return OK;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { *bytes = 1ull << 30; return OK; }
// CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev); CUuuid is char bytes[16].
CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev) {
	ENTER("cuDeviceGetUuid_v2");
	if (dev < 0 || dev >= devices) return INVALID_DEVICE;
	memcpy(uuid, uuids[dev], 16);
	return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
	ENTER("cuDeviceGetAttribute");
	switch (attr) {
	case 16: *v = 4; return OK;  // multiprocessors
	case 75: *v = 9; return OK;  // compute capability major
	case 76: *v = 0; return OK;  // minor
	}
	return INVALID_VALUE;
}
CUresult cuDevicePrimaryCtxRetain(uintptr_t *ctx, int dev) {
	ENTER("cuDevicePrimaryCtxRetain");
	if (dev < 0 || dev >= devices) return INVALID_DEVICE;
	*ctx = 0xC0DE0 + (uintptr_t)dev;
	pthread_mutex_lock(&mu);
	last_device = dev;
	pthread_mutex_unlock(&mu);
	count(1);
	return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { count(-1); return OK; }
CUresult cuCtxSetCurrent(uintptr_t ctx) { ENTER("cuCtxSetCurrent"); current = ctx; return OK; }
CUresult cuCtxSynchronize(void) { ENTER("cuCtxSynchronize"); NEEDCTX(); return OK; }
CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
	NEEDCTX();
	*free = 512ull << 20;
	*total = 1ull << 30;
	return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	ENTER("cuMemAlloc_v2");
	NEEDCTX();
	if (n == 0) return INVALID_VALUE;
	pthread_mutex_lock(&mu);
	int over = alloc_limit && alloc_bytes + n > alloc_limit;
	pthread_mutex_unlock(&mu);
	if (over) return OUT_OF_MEMORY;
	void *m = aligned_alloc(256, (n + 255) / 256 * 256);
	if (!m) return OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	int i = 0;
	while (i < MAXALLOC && allocs[i].ptr) i++;
	if (i == MAXALLOC) {
		pthread_mutex_unlock(&mu);
		free(m);
		return OUT_OF_MEMORY;
	}
	allocs[i].ptr = (uint64_t)(uintptr_t)m;
	allocs[i].size = n;
	alloc_bytes += n;
	live++;
	pthread_mutex_unlock(&mu);
	*p = (uint64_t)(uintptr_t)m;
	return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
	NEEDCTX();
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXALLOC; i++) {
		if (allocs[i].ptr == p) {
			allocs[i].ptr = 0;
			alloc_bytes -= allocs[i].size;
			live--;
			pthread_mutex_unlock(&mu);
			free((void *)(uintptr_t)p);
			return OK;
		}
	}
	pthread_mutex_unlock(&mu);
	return INVALID_VALUE;
}
CUresult cuMemAllocHost_v2(void **p, size_t n) {
	ENTER("cuMemAllocHost_v2");
	NEEDCTX();
	*p = malloc(n);
	if (!*p) return OUT_OF_MEMORY;
	count(1);
	return OK;
}
CUresult cuMemFreeHost(void *p) {
	NEEDCTX();
	free(p);
	count(-1);
	return OK;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
	ENTER("cuMemcpyHtoD_v2");
	NEEDCTX();
	if (!inside(dst, n)) return INVALID_VALUE;
	memcpy((void *)(uintptr_t)dst, src, n);
	return OK;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
	ENTER("cuMemcpyDtoH_v2");
	NEEDCTX();
	if (!inside(src, n)) return INVALID_VALUE;
	memcpy(dst, (void *)(uintptr_t)src, n);
	return OK;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
	NEEDCTX();
	if (!inside(dst, n) || !inside(src, n)) return INVALID_VALUE;
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	return OK;
}
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t n) {
	ENTER("cuMemsetD32_v2");
	NEEDCTX();
	if (dst % 4 || !inside(dst, 4 * n)) return INVALID_VALUE;
	uint32_t *p = (uint32_t *)(uintptr_t)dst;
	for (size_t i = 0; i < n; i++) p[i] = v;
	return OK;
}

struct module {
	char *image;
};
struct function {
	int kernel;  // 0 fill, 1 verify, 2 copy, 3 fma, 4 pattern fill, 5 pattern verify, 6 bf16 fill, 7 bf16 compare
};
#define NKERNELS 8
static const char *kernels[NKERNELS] = {"gw_fill", "gw_verify", "gw_copy", "gw_fma", "gw_pfill", "gw_pverify", "gw_bf16fill", "gw_bf16cmp"};
static struct function functions[NKERNELS] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

CUresult cuModuleLoadDataEx(struct module **mod, const char *image, unsigned nopts, int *opts, void **vals) {
	CUresult rc = fail("cuModuleLoadDataEx");
	NEEDCTX();
	if (rc == OK && (!strstr(image, ".version") || !strstr(image, ".target"))) rc = INVALID_PTX;
	if (rc != OK) {
		// Write the JIT log the way the driver does: into the buffer that
		// option 5 names, its size (option 6) overwritten with the length.
		char *buf = 0;
		size_t size = 0;
		int sizeAt = -1;
		for (unsigned i = 0; i < nopts; i++) {
			if (opts[i] == 5) buf = vals[i];
			if (opts[i] == 6) size = (size_t)(uintptr_t)vals[i], sizeAt = i;
		}
		const char *msg = "ptxas fatal: fake JIT says no";
		if (buf && size > strlen(msg)) {
			strcpy(buf, msg);
			vals[sizeAt] = (void *)(uintptr_t)(strlen(msg) + 1);
		}
		return rc;
	}
	struct module *m = malloc(sizeof *m);
	m->image = strdup(image);
	*mod = m;
	count(1);
	return OK;
}
CUresult cuModuleUnload(struct module *m) {
	NEEDCTX();
	free(m->image);
	free(m);
	count(-1);
	return OK;
}
CUresult cuModuleGetFunction(struct function **fn, struct module *m, const char *name) {
	ENTER("cuModuleGetFunction");
	NEEDCTX();
	char want[64];
	for (int k = 0; k < NKERNELS; k++) {
		if (strcmp(name, kernels[k]) != 0) continue;
		snprintf(want, sizeof want, ".visible .entry %s(", name);
		if (!strstr(m->image, want)) return NOT_FOUND;
		*fn = &functions[k];
		return OK;
	}
	return NOT_FOUND;
}

static uint32_t pattern(uint64_t i, uint64_t seed) {
	uint32_t x = (uint32_t)i ^ (uint32_t)(i >> 32) * 0x9E3779B9u ^ (uint32_t)seed ^ (uint32_t)(seed >> 32);
	x ^= x >> 16;
	x *= 0x7FEB352Du;
	x ^= x >> 15;
	x *= 0x846CA68Bu;
	x ^= x >> 16;
	return x;
}

static uint64_t u64(void **params, int i) { return *(uint64_t *)params[i]; }
static uint32_t u32(void **params, int i) { return *(uint32_t *)params[i]; }

// word is the burn-in memory test's word, written from its definition in
// kernels.ptx rather than from the Go code, so the two are checked
// against each other.
static uint32_t word(uint32_t id, uint64_t i, uint64_t arg) {
	uint32_t key = (uint32_t)arg ^ (uint32_t)(arg >> 32);
	switch (id) {
	case 0: return key;
	case 1: return 1u << (i % 32);
	case 2: return (uint32_t)(i * 4) ^ key;
	}
	return pattern(i, arg);
}

// fma_ref computes gw_fma's result for the 256 thread indexes of a block
// with the C library's correctly rounded fmaf, independently of the Go
// reference, and caches it: the soak launches the same count many times.
static float fma_cache[256];
static uint32_t fma_cache_iters = UINT32_MAX;
static const float *fma_ref(uint32_t iters) {
	if (fma_cache_iters == iters) return fma_cache;
	const float b = 1.0f - 1.0f / 4096, c = 1.0f / 4096;
	for (int t = 0; t < 256; t++) {
		float a[8];
		a[0] = (float)t * (1.0f / 1024);
		for (int k = 1; k < 8; k++) a[k] = a[0] + (float)k;
		for (uint64_t j = 0; j < 4ull * iters; j++)
			for (int k = 0; k < 8; k++) a[k] = fmaf(a[k], b, c);
		float sum = a[0];
		for (int k = 1; k < 8; k++) sum += a[k];
		fma_cache[t] = sum;
	}
	fma_cache_iters = iters;
	return fma_cache;
}

CUresult cuLaunchKernel(struct function *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, uintptr_t stream, void **params, void **extra) {
	ENTER("cuLaunchKernel");
	NEEDCTX();
	if (fn < &functions[0] || fn >= &functions[NKERNELS]) return INVALID_HANDLE;
	if (gx == 0 || gy != 1 || gz != 1 || bx != 256 || by != 1 || bz != 1 || shared || stream || !params || extra)
		return INVALID_VALUE;
	pthread_mutex_lock(&mu);
	launches++;
	last_grid = gx;
	pthread_mutex_unlock(&mu);
	switch (fn->kernel) {
	case 0: {  // gw_fill(buf, nwords, seed)
		uint64_t buf = u64(params, 0), n = u64(params, 1), seed = u64(params, 2);
		if (!inside(buf, 4 * n)) return ILLEGAL_ADDRESS;
		uint32_t *p = (uint32_t *)(uintptr_t)buf;
		for (uint64_t i = 0; i < n; i++) p[i] = pattern(i, seed);
		if (flip_word >= 0 && (uint64_t)flip_word < n) p[flip_word] ^= 0x100;
		return OK;
	}
	case 1: {  // gw_verify(buf, nwords, seed, errcount, firstbad)
		uint64_t buf = u64(params, 0), n = u64(params, 1), seed = u64(params, 2);
		uint64_t errs = u64(params, 3), first = u64(params, 4);
		if (!inside(buf, 4 * n) || !inside(errs, 8) || !inside(first, 8)) return ILLEGAL_ADDRESS;
		const uint32_t *p = (const uint32_t *)(uintptr_t)buf;
		uint64_t bad = 0, lo = UINT64_MAX;
		for (uint64_t i = 0; i < n; i++) {
			if (p[i] != pattern(i, seed)) {
				bad++;
				if (i < lo) lo = i;
			}
		}
		*(uint64_t *)(uintptr_t)errs += bad;
		if (lo < *(uint64_t *)(uintptr_t)first) *(uint64_t *)(uintptr_t)first = lo;
		return OK;
	}
	case 2: {  // gw_copy(dst, src, n16)
		uint64_t dst = u64(params, 0), src = u64(params, 1), n = u64(params, 2);
		if (dst % 16 || src % 16) return ILLEGAL_ADDRESS;
		if (!inside(dst, 16 * n) || !inside(src, 16 * n)) return ILLEGAL_ADDRESS;
		if (dst < src + 16 * n && src < dst + 16 * n) return ILLEGAL_ADDRESS;  // the kernel assumes no overlap
		memcpy((void *)(uintptr_t)dst, (void *)(uintptr_t)src, 16 * n);
		return OK;
	}
	case 3: {  // gw_fma(out, iters): a u32 in the first four bytes of its slot
		uint64_t out = u64(params, 0);
		uint32_t iters = *(uint32_t *)params[1];
		uint64_t threads = (uint64_t)gx * bx;
		if (!inside(out, 4 * threads)) return ILLEGAL_ADDRESS;
		float *o = (float *)(uintptr_t)out;
		pthread_mutex_lock(&mu);
		const float *ref = fma_ref(iters);
		for (uint64_t t = 0; t < threads; t++) o[t] = ref[t % 256];
		pthread_mutex_unlock(&mu);
		return OK;
	}
	case 4: {  // gw_pfill(buf, nwords, arg, id)
		uint64_t buf = u64(params, 0), n = u64(params, 1), arg = u64(params, 2);
		uint32_t id = u32(params, 3);
		if (!inside(buf, 4 * n)) return ILLEGAL_ADDRESS;
		uint32_t *p = (uint32_t *)(uintptr_t)buf;
		for (uint64_t i = 0; i < n; i++) p[i] = word(id, i, arg);
		if (flip_word >= 0 && (uint64_t)flip_word < n) p[flip_word] ^= 0x100;
		return OK;
	}
	case 5: {  // gw_pverify(buf, nwords, arg, id, stats)
		uint64_t buf = u64(params, 0), n = u64(params, 1), arg = u64(params, 2);
		uint32_t id = u32(params, 3);
		uint64_t st = u64(params, 4);
		if (!inside(buf, 4 * n) || !inside(st, 19 * 8) || st % 8) return ILLEGAL_ADDRESS;
		const uint32_t *p = (const uint32_t *)(uintptr_t)buf;
		uint64_t *s = (uint64_t *)(uintptr_t)st;
		for (uint64_t i = 0; i < n; i++) {
			if (p[i] == word(id, i, arg)) continue;
			s[0]++;
			if (i < s[1]) s[1] = i;
			uint64_t slot = s[2]++;
			if (slot < 16) s[3 + slot] = i;
		}
		return OK;
	}
	case 6: {  // gw_bf16fill(buf, nwords, seed): two bf16 in [1, 2) with a sign per word
		uint64_t buf = u64(params, 0), n = u64(params, 1), seed = u64(params, 2);
		if (!inside(buf, 4 * n)) return ILLEGAL_ADDRESS;
		uint32_t *p = (uint32_t *)(uintptr_t)buf;
		for (uint64_t i = 0; i < n; i++) p[i] = (pattern(i, seed) & 0x807F807Fu) | 0x3F803F80u;
		return OK;
	}
	case 7: {  // gw_bf16cmp(ref, buf, nwords, count): bf16 elements that differ
		uint64_t ref = u64(params, 0), buf = u64(params, 1), n = u64(params, 2), cnt = u64(params, 3);
		if (!inside(ref, 4 * n) || !inside(buf, 4 * n) || !inside(cnt, 8) || cnt % 8) return ILLEGAL_ADDRESS;
		const uint16_t *a = (const uint16_t *)(uintptr_t)ref, *b = (const uint16_t *)(uintptr_t)buf;
		uint64_t bad = 0;
		for (uint64_t i = 0; i < 2 * n; i++) bad += a[i] != b[i];
		*(uint64_t *)(uintptr_t)cnt += bad;
		return OK;
	}
	}
	return INVALID_HANDLE;
}

struct event {
	struct timespec t;
};
CUresult cuEventCreate(struct event **ev, unsigned flags) {
	ENTER("cuEventCreate");
	NEEDCTX();
	*ev = calloc(1, sizeof **ev);
	count(1);
	return OK;
}
CUresult cuEventRecord(struct event *ev, uintptr_t stream) {
	NEEDCTX();
	clock_gettime(CLOCK_MONOTONIC, &ev->t);
	return OK;
}
CUresult cuEventSynchronize(struct event *ev) { ENTER("cuEventSynchronize"); NEEDCTX(); return OK; }
CUresult cuEventElapsedTime(float *ms, struct event *a, struct event *b) {
	NEEDCTX();
	double d = (b->t.tv_sec - a->t.tv_sec) * 1e3 + (b->t.tv_nsec - a->t.tv_nsec) / 1e6;
	*ms = d > 1e-3 ? (float)d : 1e-3f;
	return OK;
}
CUresult cuEventDestroy_v2(struct event *ev) {
	NEEDCTX();
	free(ev);
	count(-1);
	return OK;
}
