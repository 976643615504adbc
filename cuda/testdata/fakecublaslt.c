// A stand-in libcublasLt for the cuda package's tests: the handful of
// calls GEMMSoak makes, with a real (slow, CPU) bf16 GEMM with FP32
// accumulation. It relies on the stand-in libcuda's device pointers being
// host pointers. It checks what the soak promises to pass: compute type
// CUBLAS_COMPUTE_32F with CUDA_R_32F scale, CUDA_R_16BF column-major
// layouts, host alpha = 1 and beta = 0, the default stream, and either a
// NULL algo or the one cublasLtMatmulAlgoGetHeuristic returned, with at
// least the workspace that algo needs. The heuristic honours
// CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: its algo wants 4 MiB, and with
// less allowed (the default is 0) it offers a no-workspace algo instead.
// fake_lt_corrupt(run) flips a bit of the run'th result (0 is the first
// call); fake_lt_live counts objects not yet destroyed;
// fake_lt_heuristic(mode) makes the heuristic answer 0 normally, 1 with no
// algorithm, 2 CUBLAS_STATUS_NOT_SUPPORTED, 3 CUBLAS_STATUS_INTERNAL_ERROR;
// fake_lt_algo_calls counts matmuls that ran with the heuristic's algo.
//
// Build: cc -shared -fPIC -O2 -o libcublasLt.so.13 fakecublaslt.c

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int cublasStatus_t;
enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, INTERNAL_ERROR = 14, NOT_SUPPORTED = 15 };

static int live, calls, algo_calls, heuristic_mode;
static int corrupt_run = -1;

void fake_lt_reset(void) { live = 0, calls = 0, algo_calls = 0, heuristic_mode = 0, corrupt_run = -1; }
int fake_lt_live(void) { return live; }
int fake_lt_calls(void) { return calls; }
int fake_lt_algo_calls(void) { return algo_calls; }
void fake_lt_corrupt(int run) { corrupt_run = run; }
void fake_lt_heuristic(int mode) { heuristic_mode = mode; }

// The two algorithms the fake offers, told apart by data[0].
#define ALGO_WS 0xA160A160u
#define ALGO_NOWS 0xA1600000u
#define ALGO_WS_BYTES (4u << 20)

typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
	cublasLtMatmulAlgo_t algo;
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} cublasLtMatmulHeuristicResult_t;
_Static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "cublasLt.h says 96 bytes");

struct pref { int magic; uint64_t max_ws; };

cublasStatus_t cublasLtMatmulPreferenceCreate(struct pref **p) {
	*p = calloc(1, sizeof **p);
	(*p)->magic = 0x9f;
	live++;
	return OK;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(struct pref *p) {
	if (!p || p->magic != 0x9f) return INVALID_VALUE;
	free(p);
	live--;
	return OK;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(struct pref *p, int attr, const void *buf, size_t size) {
	if (!p || p->magic != 0x9f || !buf) return INVALID_VALUE;
	if (attr != 1 || size != sizeof(uint64_t)) return INVALID_VALUE;  // MAX_WORKSPACE_BYTES is a uint64_t
	memcpy(&p->max_ws, buf, sizeof p->max_ws);
	return OK;
}

struct handle { int magic; };
struct desc { int compute, scale; };
struct layout { int type; uint64_t rows, cols; int64_t ld; };

cublasStatus_t cublasLtCreate(struct handle **h) {
	*h = malloc(sizeof **h);
	(*h)->magic = 0x17;
	live++;
	return OK;
}
cublasStatus_t cublasLtDestroy(struct handle *h) {
	if (!h || h->magic != 0x17) return NOT_INITIALIZED;
	free(h);
	live--;
	return OK;
}
cublasStatus_t cublasLtMatmulDescCreate(struct desc **d, int compute, int scale) {
	if (compute != 68 || scale != 0) return NOT_SUPPORTED;
	*d = malloc(sizeof **d);
	(*d)->compute = compute, (*d)->scale = scale;
	live++;
	return OK;
}
cublasStatus_t cublasLtMatmulDescDestroy(struct desc *d) {
	free(d);
	live--;
	return OK;
}
cublasStatus_t cublasLtMatrixLayoutCreate(struct layout **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
	if (ld < (int64_t)rows) return INVALID_VALUE;
	*l = malloc(sizeof **l);
	**l = (struct layout){type, rows, cols, ld};
	live++;
	return OK;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(struct layout *l) {
	free(l);
	live--;
	return OK;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(struct handle *h, struct desc *op, struct layout *la, struct layout *lb,
                                              struct layout *lc, struct layout *ld, struct pref *p, int requested,
                                              cublasLtMatmulHeuristicResult_t *out, int *returned) {
	if (!h || h->magic != 0x17 || !op || !la || !lb || !lc || !ld || !p || p->magic != 0x9f) return INVALID_VALUE;
	if (requested <= 0 || !out || !returned) return INVALID_VALUE;
	switch (heuristic_mode) {
	case 1: *returned = 0; return OK;
	case 2: return NOT_SUPPORTED;
	case 3: return INTERNAL_ERROR;
	}
	memset(out, 0, sizeof *out);
	int fits = p->max_ws >= ALGO_WS_BYTES;
	out->algo.data[0] = fits ? ALGO_WS : ALGO_NOWS;
	out->workspaceSize = fits ? ALGO_WS_BYTES : 0;
	out->state = OK;
	out->wavesCount = 1.0f;
	*returned = 1;
	return OK;
}

static float bf16(uint16_t h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static uint16_t to_bf16(float f) {  // round to nearest even; no NaNs here
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7FFF + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

cublasStatus_t cublasLtMatmul(struct handle *h, struct desc *op, const float *alpha, const uint16_t *a,
                              struct layout *la, const uint16_t *b, struct layout *lb, const float *beta,
                              const uint16_t *c, struct layout *lc, uint16_t *d, struct layout *ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsBytes, uintptr_t stream) {
	if (!h || h->magic != 0x17) return NOT_INITIALIZED;
	if (!op || !la || !lb || !lc || !ld || !a || !b || !d || !alpha || !beta) return INVALID_VALUE;
	if (stream || (wsBytes && !ws) || *alpha != 1.0f || *beta != 0.0f) return INVALID_VALUE;
	if (algo) {
		if (algo->data[0] != ALGO_WS && algo->data[0] != ALGO_NOWS) return INVALID_VALUE;  // not the heuristic's
		if (algo->data[0] == ALGO_WS && wsBytes < ALGO_WS_BYTES) return INVALID_VALUE;   // too little workspace
	}
	if (la->type != 14 || lb->type != 14 || lc->type != 14 || ld->type != 14) return NOT_SUPPORTED;
	uint64_t m = la->rows, k = la->cols, n = lb->cols;
	if (lb->rows != k || ld->rows != m || ld->cols != n || lc->rows != m || lc->cols != n) return INVALID_VALUE;
	for (uint64_t j = 0; j < n; j++)
		for (uint64_t i = 0; i < m; i++) {
			float acc = 0;
			for (uint64_t p = 0; p < k; p++) acc += bf16(a[i + p * la->ld]) * bf16(b[p + j * lb->ld]);
			d[i + j * ld->ld] = to_bf16(acc);
		}
	if (calls == corrupt_run) d[m + 1] ^= 0x0040;
	calls++;
	if (algo && algo->data[0] == ALGO_WS) algo_calls++;
	return OK;
}
