// A stand-in libcublasLt for the cuda package's tests: the handful of
// calls GEMMSoak makes, with a real (slow, CPU) bf16 GEMM with FP32
// accumulation. It relies on the stand-in libcuda's device pointers being
// host pointers. It checks what the soak promises to pass: compute type
// CUBLAS_COMPUTE_32F with CUDA_R_32F scale, CUDA_R_16BF column-major
// layouts, host alpha = 1 and beta = 0, a NULL algo, the default stream.
// fake_lt_corrupt(run) flips a bit of the run'th result (0 is the first
// call); fake_lt_live counts objects not yet destroyed.
//
// Build: cc -shared -fPIC -O2 -o libcublasLt.so.13 fakecublaslt.c

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int cublasStatus_t;
enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, NOT_SUPPORTED = 15 };

static int live, calls;
static int corrupt_run = -1;

void fake_lt_reset(void) { live = 0, calls = 0, corrupt_run = -1; }
int fake_lt_live(void) { return live; }
int fake_lt_calls(void) { return calls; }
void fake_lt_corrupt(int run) { corrupt_run = run; }

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
                              const void *algo, void *ws, size_t wsBytes, uintptr_t stream) {
	if (!h || h->magic != 0x17) return NOT_INITIALIZED;
	if (!op || !la || !lb || !lc || !ld || !a || !b || !d || !alpha || !beta) return INVALID_VALUE;
	if (algo || stream || (wsBytes && !ws) || *alpha != 1.0f || *beta != 0.0f) return INVALID_VALUE;
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
	return OK;
}
