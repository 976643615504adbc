package canary

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// fakeGPUs is a GPUs backend with canned answers; hang makes List block
// until release is closed, ignoring its context, as a wedged driver call does.
type fakeGPUs struct {
	driver    gpuwarden.Driver
	driverErr error
	gpus      []gpuwarden.GPU
	hang      chan struct{}
	sources   []gpuwarden.XIDSource
}

func (f *fakeGPUs) Driver(context.Context) (gpuwarden.Driver, error) { return f.driver, f.driverErr }

func (f *fakeGPUs) List(context.Context) ([]gpuwarden.GPU, error) {
	if f.hang != nil {
		<-f.hang
	}
	return f.gpus, nil
}

func (f *fakeGPUs) Sample(context.Context, int) (gpuwarden.Telemetry, error) {
	return gpuwarden.Telemetry{}, errors.New("not simulated")
}

// Health is a clean card whose Xid sources are both live, or the sources
// the fake was given.
func (f *fakeGPUs) Health(context.Context, int) (gpuwarden.Health, error) {
	if f.sources != nil {
		return gpuwarden.Health{XIDSources: f.sources}, nil
	}
	return gpuwarden.Health{XIDSources: []gpuwarden.XIDSource{{Name: "kmsg", Live: true}, {Name: "nvml-events", Live: true}}}, nil
}

func (f *fakeGPUs) Close() error { return nil }

// h100 is one H100 SXM as NVML reports it: 81559 MiB, 79.6 GiB.
func h100(i int) gpuwarden.GPU {
	return gpuwarden.GPU{Index: i, Name: "NVIDIA H100 80GB HBM3", Model: "H100-SXM", VRAMBytes: 81559 << 20,
		ComputeCapability: "9.0", ECC: true, Persistence: true}
}

func twoH100() *fakeGPUs {
	return &fakeGPUs{driver: gpuwarden.Driver{Version: "580.159.04", CUDAVersion: "13.0"}, gpus: []gpuwarden.GPU{h100(0), h100(1)}}
}

// cannedTorch is what the script prints on a box with PyTorch 2.11 for CUDA 13.0.
const cannedTorch = `{"errors": [], "frameworks": {"torch": {"cuda": "13.0", "cudnn": 91002, "sees_gpu": true, "version": "2.11.0+cu130"}}, "python": "3.12.3"}`

// fakeRun answers the Python probe with out and fails any other command.
func fakeRun(out string) func(context.Context, string, ...string) ([]byte, error) {
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		if len(args) != 2 || args[0] != "-c" || args[1] != pythonScript {
			return nil, errors.New("unexpected command " + name)
		}
		return []byte(out), nil
	}
}

// environ is the environment the fake root tests run with.
var environ = []string{
	"PATH=/usr/bin", "CUDA_VISIBLE_DEVICES=0,1", "NCCL_DEBUG=INFO", "NCCL_IB_HCA=mlx5_0,mlx5_1",
	"LD_LIBRARY_PATH=/opt/nccl/lib:relative/lib", "NOT_NCCL_X=1",
}

func fakeOptions() Options {
	return Options{
		GPUs:    twoH100(),
		Root:    filepath.Join("testdata", "root"),
		Environ: func() []string { return environ },
		Run:     fakeRun(cannedTorch),
		Pythons: []string{"python3"},
	}
}

// rootFacts are the facts of testdata/root with fakeOptions.
var rootFacts = gpuwarden.Facts{
	"gpu.count":                     "2",
	"gpu.model":                     "H100-SXM",
	"gpu.vram_gb":                   "80",
	"gpu.compute_capability":        "9.0",
	"gpu.ecc":                       "on",
	"gpu.mig":                       "off",
	"gpu.persistence":               "on",
	"driver.version":                "580.159.04",
	"cuda.driver_version":           "13.0",
	"os.id":                         "ubuntu",
	"os.version_id":                 "24.04",
	"os.kernel":                     "6.8.0-49-generic",
	"cudnn.version":                 "9.1.0",
	"nccl.version":                  "2.21.5",
	"container.runtime":             "docker",
	"container.image":               "nvcr.io/nvidia/pytorch:24.05-py3",
	"container.name":                "train-7f3a",
	"env.CUDA_VISIBLE_DEVICES":      "0,1",
	"env.NCCL_DEBUG":                "INFO",
	"env.NCCL_IB_HCA":               "mlx5_0,mlx5_1",
	"python.python3.version":        "3.12.3",
	"python.python3.torch.version":  "2.11.0+cu130",
	"python.python3.torch.cuda":     "13.0",
	"python.python3.torch.cudnn":    "9.10.2",
	"python.python3.torch.sees_gpu": "true",
}

func TestCollectFakeRoot(t *testing.T) {
	got, notes, err := Collect(context.Background(), fakeOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) > 0 {
		t.Errorf("notes = %q, want none", notes)
	}
	diffFacts(t, got, rootFacts)
}

// diffFacts reports every key that differs, rather than one map dump.
func diffFacts(t *testing.T, got, want gpuwarden.Facts) {
	t.Helper()
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			t.Errorf("%s = %q (present %v), want %q (present %v)", k, g, gok, w, wok)
		}
	}
}

// TestCollectHungProbes hangs the Python probe (blocking until its context
// ends) and the GPU list (ignoring its context): both become notes within
// the timeout and every other fact still arrives.
func TestCollectHungProbes(t *testing.T) {
	o := fakeOptions()
	o.Timeout = 200 * time.Millisecond
	gpus := twoH100()
	gpus.hang = make(chan struct{})
	defer close(gpus.hang) // let the abandoned call finish after the test
	o.GPUs = gpus
	o.Run = func(ctx context.Context, _ string, _ ...string) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}

	start := time.Now()
	got, notes, err := Collect(context.Background(), o)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed > o.Timeout+300*time.Millisecond {
		t.Errorf("Collect took %v with a %v timeout", elapsed, o.Timeout)
	}
	wantNotes := []string{"gpu: timed out after 200ms", "python3: timed out after 200ms"}
	if !slices.Equal(notes, wantNotes) {
		t.Errorf("notes = %q, want %q", notes, wantNotes)
	}
	want := maps.Clone(rootFacts)
	maps.DeleteFunc(want, func(k, _ string) bool { return strings.HasPrefix(k, "gpu.") || strings.HasPrefix(k, "python.") })
	diffFacts(t, got, want)
}

func TestCollectCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	o := fakeOptions()
	o.Run = func(ctx context.Context, _ string, _ ...string) ([]byte, error) {
		cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	got, notes, err := Collect(ctx, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !slices.Contains(notes, "python3: stopped: context canceled") {
		t.Errorf("notes = %q, want the Python probe stopped", notes)
	}
	if got == nil {
		t.Error("facts = nil, want what was found before the cancel")
	}
}

// TestCollectFailures runs on an empty root with a driver that fails: each
// failure is a note naming its probe, and the probes that can still answer do.
func TestCollectFailures(t *testing.T) {
	gpus := twoH100()
	gpus.driverErr = errors.New("NVML: driver not loaded")
	o := Options{
		GPUs:    gpus,
		Root:    t.TempDir(),
		Environ: func() []string { return nil },
		Run: func(context.Context, string, ...string) ([]byte, error) {
			return []byte("Traceback ...\n"), errors.New("exit status 1: SyntaxError: invalid syntax")
		},
		Pythons: []string{"/usr/bin/python3", "/opt/conda/bin/python3", "python2"},
		Uname:   func() string { return "6.8.0-49-generic\n" },
	}
	got, notes, err := Collect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	wantNotes := []string{
		"driver: read driver: NVML: driver not loaded",
		"os: read /etc/os-release: no such file or directory",
		"python3: exit status 1: SyntaxError: invalid syntax",
		"python3: skipped /opt/conda/bin/python3: its facts would overwrite those of /usr/bin/python3",
		"python2: exit status 1: SyntaxError: invalid syntax",
	}
	if !slices.Equal(notes, wantNotes) {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(notes, "\n"), strings.Join(wantNotes, "\n"))
	}
	want := gpuwarden.Facts{"gpu.count": "2", "gpu.model": "H100-SXM", "gpu.vram_gb": "80", "gpu.compute_capability": "9.0",
		"gpu.ecc": "on", "gpu.mig": "off", "gpu.persistence": "on", "os.kernel": "6.8.0-49-generic", "container.runtime": "none"}
	diffFacts(t, got, want)
}

func TestCollectPanickingProbe(t *testing.T) {
	o := fakeOptions()
	o.Run = func(context.Context, string, ...string) ([]byte, error) { panic("runner bug") }
	got, notes, err := Collect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(notes, []string{"python3: panic: runner bug"}) {
		t.Errorf("notes = %q", notes)
	}
	if got["os.id"] != "ubuntu" {
		t.Errorf("os.id = %q, want the other probes' facts", got["os.id"])
	}
}

func TestGPUFacts(t *testing.T) {
	a100 := gpuwarden.GPU{Name: "NVIDIA A100-SXM4-80GB", Model: "A100-80GB", VRAMBytes: 81920 << 20, ComputeCapability: "8.0"}
	h200 := gpuwarden.GPU{Name: "NVIDIA H200", Model: "H200", VRAMBytes: 141 << 30, ComputeCapability: "9.0", MIG: true}
	h200real := gpuwarden.GPU{Name: "NVIDIA H200", VRAMBytes: 143771 << 20, ComputeCapability: "9.0"}
	h200sliced := h200
	h200sliced.MIGInstances = []gpuwarden.MIGInstance{{Index: 1, GPUInstanceID: 2, Profile: "3g.71gb"}, {Index: 0, GPUInstanceID: 1, Profile: "3g.71gb"}}
	tests := []struct {
		name string
		gpus []gpuwarden.GPU
		want gpuwarden.Facts
	}{
		{"none", nil, gpuwarden.Facts{"gpu.count": "0"}},
		{"two H100", []gpuwarden.GPU{h100(0), h100(1)}, gpuwarden.Facts{"gpu.count": "2", "gpu.model": "H100-SXM",
			"gpu.vram_gb": "80", "gpu.compute_capability": "9.0", "gpu.ecc": "on", "gpu.mig": "off", "gpu.persistence": "on"}},
		{"simulated H200", []gpuwarden.GPU{h200}, gpuwarden.Facts{"gpu.count": "1", "gpu.model": "H200",
			"gpu.vram_gb": "141", "gpu.compute_capability": "9.0", "gpu.ecc": "off", "gpu.mig": "on", "gpu.persistence": "off",
			"gpu.mig_layout": "no instances"}},
		{"MIG layout, one GPU off", []gpuwarden.GPU{h200sliced, h200real}, gpuwarden.Facts{"gpu.count": "2", "gpu.model": "H200,NVIDIA H200",
			"gpu.vram_gb": "140,141", "gpu.compute_capability": "9.0", "gpu.ecc": "off", "gpu.mig": "mixed", "gpu.persistence": "off",
			"gpu.mig_layout": "GI 1/CI 0 3g.71gb; GI 2/CI 0 3g.71gb,off"}},
		{"no model falls back to the name", []gpuwarden.GPU{h200real}, gpuwarden.Facts{"gpu.count": "1",
			"gpu.model": "NVIDIA H200", "gpu.vram_gb": "140", "gpu.compute_capability": "9.0", "gpu.ecc": "off",
			"gpu.mig": "off", "gpu.persistence": "off"}},
		{"mixed", []gpuwarden.GPU{h100(0), a100, h100(2), a100}, gpuwarden.Facts{"gpu.count": "4",
			"gpu.model": "A100-80GB,H100-SXM", "gpu.vram_gb": "80", "gpu.compute_capability": "8.0,9.0",
			"gpu.ecc": "mixed", "gpu.mig": "off", "gpu.persistence": "mixed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{GPUs: &fakeGPUs{gpus: tt.gpus}}
			got, _, err := o.probeGPUs(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			diffFacts(t, got, tt.want)
		})
	}
}

// writeRoot makes a root holding files (path → contents) for one case.
func writeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestContainerFacts(t *testing.T) {
	containerenv := "engine=\"podman-5.0\"\nname=\"job-1\"\nimage=\"docker.io/library/ubuntu:24.04\"\n"
	tests := []struct {
		name  string
		files map[string]string
		env   []string
		want  gpuwarden.Facts
	}{
		{"bare metal", nil, nil, gpuwarden.Facts{"container.runtime": "none"}},
		{"docker", map[string]string{".dockerenv": ""}, nil, gpuwarden.Facts{"container.runtime": "docker"}},
		{"docker with an image named by the user", map[string]string{".dockerenv": ""}, []string{"CONTAINER_IMAGE=pytorch:24.05"},
			gpuwarden.Facts{"container.runtime": "docker", "container.image": "pytorch:24.05"}},
		{"podman", map[string]string{"run/.containerenv": containerenv}, nil, gpuwarden.Facts{"container.runtime": "podman",
			"container.image": "docker.io/library/ubuntu:24.04", "container.name": "job-1"}},
		{"rootless podman leaves .containerenv empty", map[string]string{"run/.containerenv": ""}, nil,
			gpuwarden.Facts{"container.runtime": "podman"}},
		{"GPUWARDEN_IMAGE wins", map[string]string{"run/.containerenv": containerenv},
			[]string{"GPUWARDEN_IMAGE=ours:1", "CONTAINER_IMAGE=theirs:2"}, gpuwarden.Facts{"container.runtime": "podman",
				"container.image": "ours:1", "container.name": "job-1"}},
		{"kubernetes", nil, []string{"KUBERNETES_SERVICE_HOST=10.0.0.1", "CONTAINER_IMAGE="},
			gpuwarden.Facts{"container.runtime": "kubernetes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{Root: writeRoot(t, tt.files), Environ: func() []string { return tt.env }}.withDefaults()
			got, notes, err := o.probeContainer(context.Background())
			if err != nil || len(notes) > 0 {
				t.Fatalf("err = %v, notes = %q", err, notes)
			}
			diffFacts(t, got, tt.want)
		})
	}
}

func TestLibraryVersions(t *testing.T) {
	hdr := func(maj, min, patch string) string {
		return "#define CUDNN_MAJOR " + maj + "\n#define CUDNN_MINOR " + min + "\n#  define CUDNN_PATCHLEVEL " + patch + "\n"
	}
	lib := "usr/lib/x86_64-linux-gnu/"
	tests := []struct {
		name      string
		files     map[string]string
		env       []string
		want      gpuwarden.Facts
		wantNotes []string
	}{
		{"nothing installed", nil, nil, gpuwarden.Facts{}, nil},
		{"soname link only", map[string]string{lib + "libcudnn.so.9": "", lib + "libnccl.so.2": ""}, nil,
			gpuwarden.Facts{"cudnn.version": "9", "nccl.version": "2"}, nil},
		{"fullest name wins", map[string]string{lib + "libcudnn.so.9": "", lib + "libcudnn.so.9.1.0": "",
			lib + "libcudnn.so": "", lib + "libcudnn.so.9.1.0.bak": "", lib + "libnccl.so.2.21.5": "", lib + "libnccl.so.2": ""},
			nil, gpuwarden.Facts{"cudnn.version": "9.1.0", "nccl.version": "2.21.5"}, nil},
		{"header gives the exact version", map[string]string{lib + "libcudnn.so.9": "", "usr/local/cuda/include/cudnn_version.h": hdr("9", "10", "2")},
			nil, gpuwarden.Facts{"cudnn.version": "9.10.2"}, nil},
		{"header alone", map[string]string{"usr/include/cudnn_version.h": hdr("9", "1", "0")}, nil,
			gpuwarden.Facts{"cudnn.version": "9.1.0"}, nil},
		{"header of another major", map[string]string{"usr/local/cuda/lib64/libcudnn.so.8.9.7": "", "usr/include/cudnn_version.h": hdr("9", "1", "0")},
			nil, gpuwarden.Facts{"cudnn.version": "8.9.7"},
			[]string{"/usr/include/cudnn_version.h says 9.1.0 but the libraries are 8.9.7; recording 8.9.7"}},
		{"two majors", map[string]string{lib + "libcudnn.so.8.9.7": "", "usr/lib64/libcudnn.so.9.1.0": ""}, nil,
			gpuwarden.Facts{"cudnn.version": "9.1.0"}, []string{"found libcudnn majors 8 besides 9; recording 9.1.0"}},
		{"LD_LIBRARY_PATH", map[string]string{"opt/nccl/lib/libnccl.so.2.27.3": "", lib + "libnccl.so.2.21.5": ""},
			[]string{"LD_LIBRARY_PATH=/opt/nccl/lib"}, gpuwarden.Facts{"nccl.version": "2.27.3"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{Root: writeRoot(t, tt.files), Environ: func() []string { return tt.env }}.withDefaults()
			got := gpuwarden.Facts{}
			var notes []string
			for _, p := range []func(context.Context) (gpuwarden.Facts, []string, error){o.probeCUDNN, o.probeNCCL} {
				f, n, err := p(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				maps.Copy(got, f)
				notes = append(notes, n...)
			}
			diffFacts(t, got, tt.want)
			if !slices.Equal(notes, tt.wantNotes) {
				t.Errorf("notes = %q, want %q", notes, tt.wantNotes)
			}
		})
	}
}

func TestEnvFacts(t *testing.T) {
	o := Options{Environ: func() []string {
		return []string{"CUDA_VISIBLE_DEVICES=", "NCCL_SOCKET_IFNAME=eth0", "NCCL_P2P_DISABLE=1", "nccl_lower=1", "HOME=/root"}
	}}.withDefaults()
	got, _, _ := o.probeEnv(context.Background())
	// Set but empty hides every GPU, so it is a fact; an unset variable is not.
	diffFacts(t, got, gpuwarden.Facts{"env.CUDA_VISIBLE_DEVICES": "", "env.NCCL_SOCKET_IFNAME": "eth0", "env.NCCL_P2P_DISABLE": "1"})
}

func TestParseOSRelease(t *testing.T) {
	got := parseOSRelease([]byte("# comment\nID=debian\nVERSION_ID=\"12\"\nNAME='Debian GNU/Linux'\n" +
		"PRETTY_NAME=\"say \\\"hi\\\" \\$HOME\"\n\nBROKEN\n"))
	want := map[string]string{"ID": "debian", "VERSION_ID": "12", "NAME": "Debian GNU/Linux", "PRETTY_NAME": `say "hi" $HOME`}
	if !maps.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestPickVersion(t *testing.T) {
	tests := []struct {
		in         []string
		want       string
		wantOthers []string
	}{
		{nil, "", nil},
		{[]string{"9"}, "9", nil},
		{[]string{"9", "9.1.0", "9.1"}, "9.1.0", nil},
		{[]string{"9.1.0", "9.10.2"}, "9.10.2", nil},
		{[]string{"8.9.7", "9", "10.0.1", "8"}, "10.0.1", []string{"8", "9"}},
	}
	for _, tt := range tests {
		got, others := pickVersion(tt.in)
		if got != tt.want || !slices.Equal(others, tt.wantOthers) {
			t.Errorf("pickVersion(%q) = %q, %q; want %q, %q", tt.in, got, others, tt.want, tt.wantOthers)
		}
	}
}

// TestLockOfCollectedFacts is the flow end to end: a lock of this box's
// facts holds on this box, and a box with another driver branch drifts.
func TestLockOfCollectedFacts(t *testing.T) {
	facts, _, err := Collect(context.Background(), fakeOptions())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteLock(&b, NewLock(facts, "h100-a", time.Now())); err != nil {
		t.Fatal(err)
	}
	l, err := ReadLock("gpuwarden.lock", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if d := l.Diff(facts); len(d) > 0 {
		t.Errorf("drift on the same box: %+v", d)
	}
	other := maps.Clone(facts)
	other["driver.version"] = "590.12.01"       // another branch: drift
	other["cuda.driver_version"] = "13.1"       // newer: holds
	other["os.kernel"] = "6.8.0-51-generic"     // ignored
	other["python.python3.version"] = "3.12.8"  // same major: holds
	delete(other, "python.python3.torch.cudnn") // missing: drift
	want := []gpuwarden.Drift{
		{Field: "driver.version", Locked: "580.159.04", Now: "590.12.01", Match: gpuwarden.MatchMajor},
		{Field: "python.python3.torch.cudnn", Locked: "9.10.2", Now: "", Match: gpuwarden.MatchExact},
	}
	if got := l.Diff(other); !slices.Equal(got, want) {
		t.Errorf("Diff = %+v\nwant %+v", got, want)
	}
}

// BenchmarkCollect times a canary on the fake root with simulated GPUs,
// without Python and with this machine's real python3, which bounds the
// wall time: the interpreter's start, not the probes, is what costs.
func BenchmarkCollect(b *testing.B) {
	o := Options{GPUs: twoH100(), Root: filepath.Join("testdata", "root")}
	b.Run("files", func(b *testing.B) { benchCollect(b, o, "os.id") })
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("no python3")
	}
	o.Pythons = []string{"python3"}
	b.Run("python3", func(b *testing.B) { benchCollect(b, o, "python.python3.version") })
}

func benchCollect(b *testing.B, o Options, key string) {
	for b.Loop() {
		f, notes, err := Collect(context.Background(), o)
		if err != nil || len(notes) > 0 || f[key] == "" {
			b.Fatalf("err = %v, notes = %q, %s missing", err, notes, key)
		}
	}
}

// TestMIGLayoutDrift: a lock made with one MIG layout finds a box with
// another as drift, and a box without MIG as well.
func TestMIGLayoutDrift(t *testing.T) {
	layout := func(profiles ...string) []gpuwarden.GPU {
		g := gpuwarden.GPU{Name: "NVIDIA H100 80GB HBM3", Model: "H100-SXM", VRAMBytes: 80 << 30, ComputeCapability: "9.0", MIG: len(profiles) > 0}
		for i, p := range profiles {
			g.MIGInstances = append(g.MIGInstances, gpuwarden.MIGInstance{Index: i, GPUInstanceID: i + 1, Profile: p})
		}
		return []gpuwarden.GPU{g}
	}
	facts := func(gpus []gpuwarden.GPU) gpuwarden.Facts {
		f, _, err := Options{GPUs: &fakeGPUs{gpus: gpus}}.probeGPUs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	lock := NewLock(facts(layout("3g.40gb", "3g.40gb")), "box", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	tests := []struct {
		name  string
		now   []gpuwarden.GPU
		drift []string
	}{
		{"same layout", layout("3g.40gb", "3g.40gb"), nil},
		{"other layout", layout("1g.10gb", "1g.10gb", "1g.10gb"), []string{"gpu.mig_layout"}},
		{"MIG off", layout(), []string{"gpu.mig", "gpu.mig_layout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Compare(lock, facts(tt.now), nil)
			var got []string
			for _, d := range c.Drift {
				got = append(got, d.Field)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.drift) {
				t.Errorf("drift %v, want %v (%+v)", got, tt.drift, c.Drift)
			}
		})
	}
}

// TestXIDSourceNotes: the canary says when an Xid source cannot be read.
func TestXIDSourceNotes(t *testing.T) {
	tests := []struct {
		name    string
		sources []gpuwarden.XIDSource
		want    string
	}{
		{"both live", nil, ""},
		{"no kmsg", []gpuwarden.XIDSource{{Name: "kmsg", Reason: "permission denied"}, {Name: "nvml-events", Live: true}},
			"Xid source unavailable: kmsg unavailable (permission denied)"},
		{"blind", []gpuwarden.XIDSource{{Name: "kmsg", Reason: "permission denied"}, {Name: "nvml-events", Reason: "not supported"}},
			"Xid source unavailable: no Xid would be seen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{GPUs: &fakeGPUs{gpus: []gpuwarden.GPU{h100(0)}, sources: tt.sources}}
			_, notes, err := o.probeGPUs(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(notes, "; ")
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("notes %q, want %q", got, tt.want)
			}
		})
	}
}
