//go:build !gpu

package cuda

// gpuBuild says whether the real-GPU suite is built in; see gpu_test.go.
const gpuBuild = false
