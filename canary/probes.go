package canary

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// probeDriver reads the driver and the newest CUDA it runs.
func (o Options) probeDriver(ctx context.Context) (gpuwarden.Facts, []string, error) {
	d, err := o.GPUs.Driver(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read driver: %w", err)
	}
	f := gpuwarden.Facts{}
	if d.Version != "" {
		f["driver.version"] = d.Version
	}
	if d.CUDAVersion != "" {
		f["cuda.driver_version"] = d.CUDAVersion
	}
	return f, nil, nil
}

// probeGPUs summarises the devices as one value per fact, so that a lock
// does not depend on which index a model sits at.
func (o Options) probeGPUs(ctx context.Context) (gpuwarden.Facts, []string, error) {
	gpus, err := o.GPUs.List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list GPUs: %w", err)
	}
	f := gpuwarden.Facts{"gpu.count": strconv.Itoa(len(gpus))}
	if len(gpus) == 0 {
		return f, nil, nil
	}
	var models, vram, cc []string
	var ecc, mig, persistence []bool
	for _, g := range gpus {
		m := g.Model
		if m == "" {
			m = g.Name
		}
		models = append(models, m)
		if g.VRAMBytes > 0 {
			// GiB, as nvidia-smi's MiB divided by 1024: an H100 80GB reports
			// 79.6 and an H200 140.4 or 141, and rounding absorbs the few
			// MiB a driver update reserves differently.
			vram = append(vram, strconv.FormatFloat(math.Round(float64(g.VRAMBytes)/(1<<30)), 'f', 0, 64))
		}
		cc = append(cc, g.ComputeCapability)
		ecc, mig, persistence = append(ecc, g.ECC), append(mig, g.MIG), append(persistence, g.Persistence)
	}
	for key, vs := range map[string][]string{"gpu.model": models, "gpu.vram_gb": vram, "gpu.compute_capability": cc} {
		if v := distinct(vs); v != "" {
			f[key] = v
		}
	}
	f["gpu.ecc"], f["gpu.mig"], f["gpu.persistence"] = onOff(ecc), onOff(mig), onOff(persistence)
	// The MIG layout is a fact only where MIG is on, so that locks of
	// boxes without MIG stay as they were; a lock made with one layout
	// finds a box with another (or without MIG) as drift.
	if slices.Contains(mig, true) {
		var layouts []string
		for _, g := range gpus {
			l := gpuwarden.MIGLayout(g.MIGInstances)
			switch {
			case !g.MIG:
				l = "off"
			case l == "":
				l = "no instances"
			}
			layouts = append(layouts, l)
		}
		f["gpu.mig_layout"] = distinct(layouts)
	}
	return f, xidNotes(ctx, o.GPUs, gpus[0].Index), nil
}

// xidNotes says when an Xid source cannot be read: a canary that found no
// Xid on a box where nothing could have found one must not read as clean.
func xidNotes(ctx context.Context, gpus gpuwarden.GPUs, index int) []string {
	h, err := gpus.Health(ctx, index)
	if err != nil {
		return []string{"Xid sources unknown: " + err.Error()}
	}
	var notes []string
	switch {
	case len(h.XIDSources) > 0 && gpuwarden.XIDBlind(h.XIDSources):
		notes = append(notes, "Xid source unavailable: no Xid would be seen ("+gpuwarden.DescribeXIDSources(h.XIDSources)+")")
	default:
		for _, src := range h.XIDSources {
			if !src.Live {
				notes = append(notes, "Xid source unavailable: "+gpuwarden.DescribeXIDSources([]gpuwarden.XIDSource{src}))
			}
		}
	}
	return notes
}

// distinct joins the distinct non-empty values, sorted: one value when all
// GPUs agree, and a stable list on a mixed box.
func distinct(vs []string) string {
	var out []string
	for _, v := range vs {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// onOff is "on" or "off" when every GPU agrees and "mixed" otherwise.
func onOff(bs []bool) string {
	on := 0
	for _, b := range bs {
		if b {
			on++
		}
	}
	switch on {
	case 0:
		return "off"
	case len(bs):
		return "on"
	}
	return "mixed"
}

// probeOS reads ID and VERSION_ID from os-release, where every distribution
// since 2012 says what it is.
func (o Options) probeOS(context.Context) (gpuwarden.Facts, []string, error) {
	var data []byte
	var err error
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		if data, err = os.ReadFile(o.path(p)); err == nil {
			break
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read /etc/os-release: %w", cause(err))
	}
	kv := parseOSRelease(data)
	f := gpuwarden.Facts{}
	if v := kv["ID"]; v != "" {
		f["os.id"] = v
	}
	if v := kv["VERSION_ID"]; v != "" {
		f["os.version_id"] = v
	}
	return f, nil, nil
}

// parseOSRelease reads os-release's shell-like KEY=value lines, with the
// quoting and backslash escapes os-release(5) allows.
func parseOSRelease(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		out[strings.TrimSpace(k)] = unquoteShell(strings.TrimSpace(v))
	}
	return out
}

// unquoteShell removes one level of shell quoting.
func unquoteShell(v string) string {
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return v[1 : len(v)-1]
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			if v[i] == '\\' && i+1 < len(v) && strings.IndexByte("\"\\$`", v[i+1]) >= 0 {
				i++
			}
			b.WriteByte(v[i])
		}
		return b.String()
	}
	return v
}

// probeKernel records the kernel release, for reading a drift report rather
// than for checking (its default rule is ignore).
func (o Options) probeKernel(context.Context) (gpuwarden.Facts, []string, error) {
	if o.Uname != nil {
		if r := strings.TrimSpace(o.Uname()); r != "" {
			return gpuwarden.Facts{"os.kernel": r}, nil, nil
		}
		return nil, nil, errors.New("uname returned no release")
	}
	data, err := os.ReadFile(o.path("/proc/sys/kernel/osrelease"))
	if err != nil {
		return nil, nil, fmt.Errorf("read /proc/sys/kernel/osrelease: %w", cause(err))
	}
	r := strings.TrimSpace(string(data))
	if r == "" {
		return nil, nil, errors.New("kernel release is empty")
	}
	return gpuwarden.Facts{"os.kernel": r}, nil, nil
}

// libDirs are the directories the dynamic loader searches, in its order:
// LD_LIBRARY_PATH first, then the usual system and CUDA directories.
func (o Options) libDirs() []string {
	var dirs []string
	if v, ok := o.Env("LD_LIBRARY_PATH"); ok {
		for _, d := range filepath.SplitList(v) {
			// A relative entry depends on the job's working directory,
			// which the canary cannot know.
			if filepath.IsAbs(d) {
				dirs = append(dirs, filepath.Clean(d))
			}
		}
	}
	dirs = append(dirs, "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/cuda/lib64",
		"/usr/lib64", "/usr/local/lib")
	var out []string
	for _, d := range dirs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// versionSuffix is the part of a library name after ".so.": "9", "9.1.0".
var versionSuffix = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*$`)

// libVersions lists the versions in the names of the files prefix+VERSION
// ("libcudnn.so.9.1.0") found in the library dirs.
func (o Options) libVersions(ctx context.Context, prefix string) []string {
	var out []string
	for _, d := range o.libDirs() {
		if ctx.Err() != nil {
			break
		}
		entries, err := os.ReadDir(o.path(d))
		if err != nil {
			continue // most hosts lack most of these directories
		}
		for _, e := range entries {
			if v, ok := strings.CutPrefix(e.Name(), prefix); ok && versionSuffix.MatchString(v) && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// pickVersion chooses among the versions in library names: the newest
// major, since a job built against it would load it, and within it the
// fullest name, since "9" is only the soname link to "9.1.0". It also
// returns the other majors found, which a user should hear about.
func pickVersion(vs []string) (string, []string) {
	best := ""
	for _, v := range vs {
		switch c := gpuwarden.CompareVersions(major(v), major(best)); {
		case best == "" || c > 0:
			best = v
		case c == 0 && (parts(v) > parts(best) || parts(v) == parts(best) && gpuwarden.CompareVersions(v, best) > 0):
			best = v
		}
	}
	var others []string
	for _, v := range vs {
		if m := major(v); m != major(best) && !slices.Contains(others, m) {
			others = append(others, m)
		}
	}
	slices.SortFunc(others, gpuwarden.CompareVersions)
	return best, others
}

func major(v string) string {
	m, _, _ := strings.Cut(v, ".")
	return m
}

func parts(v string) int { return strings.Count(v, ".") + 1 }

// probeCUDNN finds the cuDNN version. The header gives it exactly, while
// library names may be no more than the soname ("libcudnn.so.9"), so the
// header wins when it agrees with the libraries' major; when it does not,
// it belongs to another install and the libraries are what a job loads.
func (o Options) probeCUDNN(ctx context.Context) (gpuwarden.Facts, []string, error) {
	lib, others := pickVersion(o.libVersions(ctx, "libcudnn.so."))
	var notes []string
	if len(others) > 0 {
		notes = append(notes, fmt.Sprintf("found libcudnn majors %s besides %s; recording %s", strings.Join(others, ", "), major(lib), lib))
	}
	hdr, hdrPath := "", ""
	for _, p := range []string{"/usr/include/cudnn_version.h", "/usr/local/cuda/include/cudnn_version.h"} {
		data, err := os.ReadFile(o.path(p))
		if err != nil {
			continue
		}
		if hdr = parseCUDNNHeader(data); hdr != "" {
			hdrPath = p
			break
		}
	}
	v := lib
	switch {
	case hdr != "" && (lib == "" || major(hdr) == major(lib)):
		v = hdr
	case hdr != "":
		notes = append(notes, fmt.Sprintf("%s says %s but the libraries are %s; recording %s", hdrPath, hdr, lib, lib))
	}
	if v == "" {
		return nil, notes, nil
	}
	return gpuwarden.Facts{"cudnn.version": v}, notes, nil
}

var cudnnDefine = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*define[ \t]+CUDNN_(MAJOR|MINOR|PATCHLEVEL)[ \t]+([0-9]+)`)

// parseCUDNNHeader reads CUDNN_MAJOR, CUDNN_MINOR and CUDNN_PATCHLEVEL.
func parseCUDNNHeader(data []byte) string {
	got := map[string]string{}
	for _, m := range cudnnDefine.FindAllSubmatch(data, -1) {
		if _, seen := got[string(m[1])]; !seen {
			got[string(m[1])] = string(m[2])
		}
	}
	if got["MAJOR"] == "" || got["MINOR"] == "" || got["PATCHLEVEL"] == "" {
		return ""
	}
	return got["MAJOR"] + "." + got["MINOR"] + "." + got["PATCHLEVEL"]
}

// probeNCCL finds the NCCL version in the library's name.
func (o Options) probeNCCL(ctx context.Context) (gpuwarden.Facts, []string, error) {
	v, others := pickVersion(o.libVersions(ctx, "libnccl.so."))
	var notes []string
	if len(others) > 0 {
		notes = append(notes, fmt.Sprintf("found libnccl majors %s besides %s; recording %s", strings.Join(others, ", "), major(v), v))
	}
	if v == "" {
		return nil, notes, nil
	}
	return gpuwarden.Facts{"nccl.version": v}, notes, nil
}

// probeContainer tells which container, if any, the canary runs in. "none"
// is a fact too: a job proven on bare metal that lands in a container has
// changed stack.
func (o Options) probeContainer(context.Context) (gpuwarden.Facts, []string, error) {
	f := gpuwarden.Facts{"container.runtime": "none"}
	var notes []string
	env, envErr := os.ReadFile(o.path("/run/.containerenv"))
	podman := envErr == nil
	if envErr != nil && !errors.Is(envErr, fs.ErrNotExist) {
		// Present but unreadable still means podman.
		podman = true
		notes = append(notes, fmt.Sprintf("read /run/.containerenv: %v", cause(envErr)))
	}
	switch {
	case exists(o.path("/.dockerenv")):
		f["container.runtime"] = "docker"
	case podman:
		f["container.runtime"] = "podman"
	case o.has("KUBERNETES_SERVICE_HOST"):
		f["container.runtime"] = "kubernetes"
	}
	if envErr == nil {
		kv := parseOSRelease(env) // the same KEY="value" lines
		if v := kv["image"]; v != "" {
			f["container.image"] = v
		}
		if v := kv["name"]; v != "" {
			f["container.name"] = v
		}
	}
	for _, k := range []string{"CONTAINER_IMAGE", "GPUWARDEN_IMAGE"} { // later wins
		if v, ok := o.Env(k); ok && v != "" {
			f["container.image"] = v
		}
	}
	return f, notes, nil
}

func (o Options) has(key string) bool {
	v, ok := o.Env(key)
	return ok && v != ""
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// probeEnv records the variables that decide which GPUs a job sees and how
// NCCL talks; a variable set to "" is recorded, since "" hides every GPU.
func (o Options) probeEnv(context.Context) (gpuwarden.Facts, []string, error) {
	f := gpuwarden.Facts{}
	for _, k := range []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"} {
		if v, ok := o.Env(k); ok {
			f["env."+k] = v
		}
	}
	for _, kv := range o.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "NCCL_") {
			f["env."+k] = v
		}
	}
	return f, nil, nil
}

// cause drops the "open PATH:" of a file error whose path the note already
// names, and with it the root prefix a test or a mounted image adds.
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
