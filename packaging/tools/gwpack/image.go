package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is distroless's unprivileged user and group: the image runs as it.
const nonroot = 65532

// arch is what the image needs to know of one target architecture.
type arch struct {
	goarch  string
	triplet string          // Debian's multiarch folder for the C library
	machine elf.Machine     // what the binary and the libraries must be built for
	sysroot string          // where this machine keeps that architecture's C library
	binary  string          // the gpuwarden binary for it
	libs    map[string]bool // sonames copied into the image
}

var arches = map[string]*arch{
	"amd64": {goarch: "amd64", triplet: "x86_64-linux-gnu", machine: elf.EM_X86_64, sysroot: "/"},
	// Debian's libc6-arm64-cross (pulled in by gcc-aarch64-linux-gnu) keeps
	// the arm64 C library here.
	"arm64": {goarch: "arm64", triplet: "aarch64-linux-gnu", machine: elf.EM_AARCH64, sysroot: "/usr/aarch64-linux-gnu"},
}

// nvmlLibs are the C libraries that the host's libnvidia-ml.so.1, which the
// NVIDIA container toolkit mounts into the container, links against: the
// binary does not need them itself, the driver library it dlopens does.
var nvmlLibs = []string{"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"}

// pairFlag collects repeated KEY=VALUE flags.
type pairFlag map[string]string

func (p pairFlag) String() string { return fmt.Sprint(map[string]string(p)) }

func (p pairFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("%q: want ARCH=PATH", s)
	}
	p[k] = v
	return nil
}

// imageOptions are the image command's flags.
type imageOptions struct {
	out, version, revision, source, licenses, caCerts string
	created                                           time.Time
	bins, sysroots                                    pairFlag
}

func imageCommand(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	o := imageOptions{bins: pairFlag{}, sysroots: pairFlag{}}
	var created string
	fs.StringVar(&o.out, "out", "", "write the OCI layout to this `folder` (must not exist)")
	fs.StringVar(&o.version, "version", "", "the release, for the labels and the layout's ref name")
	fs.StringVar(&o.revision, "revision", "", "the commit, for the labels")
	fs.StringVar(&created, "created", "", "the commit's date (RFC 3339): every timestamp in the image")
	fs.StringVar(&o.source, "source", "https://github.com/gpuwarden/gpuwarden", "the source repository, for the labels")
	fs.StringVar(&o.licenses, "licenses", "NOASSERTION", "SPDX expression, for the labels")
	fs.StringVar(&o.caCerts, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to ship")
	fs.Var(o.bins, "bin", "`ARCH=PATH` of a gpuwarden binary (repeat per architecture)")
	fs.Var(o.sysroots, "sysroot", "`ARCH=DIR` holding that architecture's C library (defaults: amd64=/, arm64=/usr/aarch64-linux-gnu)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	switch {
	case o.out == "" || o.version == "" || created == "" || len(o.bins) == 0:
		return usageError{errors.New("image: -out, -version, -created and at least one -bin are required")}
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("image: unexpected argument %q", fs.Arg(0))}
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return usageError{fmt.Errorf("image: -created: %w", err)}
	}
	o.created = t.UTC()
	if _, err := os.Stat(o.out); err == nil {
		return fmt.Errorf("image: %s exists: remove it first", o.out)
	}
	return writeImage(o)
}

func writeImage(o imageOptions) error {
	certs, err := os.ReadFile(o.caCerts)
	if err != nil {
		return fmt.Errorf("image: CA certificates: %w (Debian's ca-certificates package)", err)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	names := make([]string, 0, len(o.bins))
	for name := range o.bins {
		names = append(names, name)
	}
	slices.Sort(names) // the index lists the architectures in a fixed order
	for _, name := range names {
		known, ok := arches[name]
		if !ok {
			return usageError{fmt.Errorf("image: -bin %s: unknown architecture (want amd64 or arm64)", name)}
		}
		a := *known // a copy: the table stays as it is
		a.binary = o.bins[name]
		if s, ok := o.sysroots[name]; ok {
			a.sysroot = s
		}
		img, err := buildImage(o, &a, certs)
		if err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a.goarch}},
		})
	}
	idx = mutate.Annotations(idx, labels(o)).(v1.ImageIndex)
	p, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.version,
	})); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	d, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	fmt.Printf("%s %s\n", o.out, d)
	return nil
}

// labels are the OCI annotations that both the image config (as labels)
// and the index carry.
func labels(o imageOptions) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "gpuwarden",
		"org.opencontainers.image.description": "Guards rented NVIDIA GPU boxes: plan, canary, burn-in, idle and budget stops, preemption-safe runs, fleet server",
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    o.licenses,
	}
}

func buildImage(o imageOptions, a *arch, certs []byte) (v1.Image, error) {
	fsys, err := rootfs(a, certs)
	if err != nil {
		return nil, err
	}
	raw, err := fsys.tar(o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: o.created},
		CreatedBy: "scripts/package.sh: gwpack image",
		Comment:   "gpuwarden, its C library, CA certificates, passwd and group",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = a.goarch, "linux"
	cf.Created = v1.Time{Time: o.created}
	cf.Author = "gpuwarden"
	cf.Config = v1.Config{
		User:       strconv.Itoa(nonroot) + ":" + strconv.Itoa(nonroot),
		Entrypoint: []string{"/gpuwarden"},
		Cmd:        []string{"--help"},
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
			// As in deploy/Dockerfile: a user other than root keeps its
			// data in $XDG_STATE_HOME/gpuwarden, so /var/lib/gpuwarden is
			// the data folder whoever runs the image.
			"XDG_STATE_HOME=/var/lib",
		},
		// 7070: agent dashboard and /metrics; 8080: fleet server.
		ExposedPorts: map[string]struct{}{"7070/tcp": {}, "8080/tcp": {}},
		Volumes:      map[string]struct{}{"/var/lib/gpuwarden": {}},
		Labels:       labels(o),
	}
	return mutate.ConfigFile(img, cf)
}

// fileEntry is one file, folder or link of the image's filesystem.
type fileEntry struct {
	typ      byte
	mode     int64
	uid, gid int
	data     []byte
	link     string
}

// fileTree is the image's filesystem, by path without the leading slash.
type fileTree map[string]fileEntry

func (t fileTree) dir(p string, mode int64, owner int) {
	t[p] = fileEntry{typ: tar.TypeDir, mode: mode, uid: owner, gid: owner}
}
func (t fileTree) file(p string, mode int64, data []byte) {
	t[p] = fileEntry{typ: tar.TypeReg, mode: mode, data: data}
}
func (t fileTree) symlink(p, target string) {
	t[p] = fileEntry{typ: tar.TypeSymlink, mode: 0o777, link: target}
}

// rootfs lays out what distroless/static has (passwd, group, CA
// certificates, /tmp, the nonroot home) plus the C library that this cgo
// binary and the driver's NVML library need, copied from Debian's libc6 on
// the build machine.
func rootfs(a *arch, certs []byte) (fileTree, error) {
	bin, err := os.ReadFile(a.binary)
	if err != nil {
		return nil, err
	}
	t := fileTree{}
	t.file("gpuwarden", 0o755, bin)
	// deploy/Dockerfile's path, for commands written against that image.
	t.symlink("usr/local/bin/gpuwarden", "/gpuwarden")
	t.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	t.file("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"))
	t.file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
	t.file("etc/ssl/certs/ca-certificates.crt", 0o644, certs)
	t.dir("tmp", 0o1777, 0)
	t.dir("root", 0o700, 0)
	t.dir("home/nonroot", 0o700, nonroot)
	// The data folder belongs to the image's user, so that a fresh named
	// volume mounted on it copies that ownership (deploy/Dockerfile too).
	t.dir("var/lib/gpuwarden", 0o700, nonroot)

	libDir := "lib/" + a.triplet
	// The NVIDIA container toolkit runs ldconfig in the container after it
	// mounts the driver's libraries; older releases fail where these are
	// missing (see deploy/Dockerfile).
	t.file("etc/ld.so.conf", 0o644, []byte("include /etc/ld.so.conf.d/*.conf\n"))
	t.file("etc/ld.so.conf.d/"+a.triplet+".conf", 0o644, []byte("/lib/"+a.triplet+"\n/usr/lib/"+a.triplet+"\n"))
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.binary, err)
	}
	if f.Machine != a.machine {
		return nil, fmt.Errorf("%s is built for %s, not %s", a.binary, f.Machine, a.goarch)
	}
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, fmt.Errorf("%s: interpreter: %w", a.binary, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.binary, err)
	}
	if interp == "" && len(needed) == 0 {
		// A static binary needs no C library: this is then distroless/static.
		return t, nil
	}
	a.libs = map[string]bool{}
	queue := append(slices.Clone(needed), nvmlLibs...)
	if interp != "" {
		queue = append(queue, path.Base(interp))
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if a.libs[name] {
			continue
		}
		a.libs[name] = true
		src, data, err := a.findLib(name)
		if err != nil {
			return nil, err
		}
		lf, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		if lf.Machine != a.machine {
			return nil, fmt.Errorf("%s is built for %s, not %s: wrong -sysroot", src, lf.Machine, a.goarch)
		}
		more, err := lf.ImportedLibraries()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		queue = append(queue, more...)
		t.file(libDir+"/"+name, 0o755, data)
	}
	if interp != "" {
		if p := strings.TrimPrefix(interp, "/"); p != libDir+"/"+path.Base(interp) {
			t.symlink(p, "/"+libDir+"/"+path.Base(interp))
		}
	}
	// glibc's licence travels with the glibc it covers.
	for _, doc := range []string{"usr/share/doc/libc6/copyright", "usr/share/doc/libc6-" + a.goarch + "-cross/copyright"} {
		if b, err := os.ReadFile(filepath.Join("/", doc)); err == nil {
			t.file("usr/share/doc/libc6/copyright", 0o644, b)
			break
		}
	}
	return t, nil
}

// findLib reads a C library by its soname from the architecture's sysroot.
func (a *arch) findLib(name string) (string, []byte, error) {
	for _, dir := range []string{"lib/" + a.triplet, "usr/lib/" + a.triplet, "lib"} {
		p := filepath.Join(a.sysroot, dir, name)
		if b, err := os.ReadFile(p); err == nil { // follows the soname link to the file
			return p, b, nil
		}
	}
	return "", nil, fmt.Errorf("%s: not found under %s (install Debian's libc6 for %s)", name, a.sysroot, a.goarch)
}

// tar writes the tree sorted by path, every parent folder before its
// contents, with one fixed time and numeric owners only: the same tree
// gives the same bytes.
func (t fileTree) tar(mtime time.Time) ([]byte, error) {
	for p := range t.paths() {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := t[d]; !ok {
				t.dir(d, 0o755, 0)
			}
		}
	}
	names := make([]string, 0, len(t))
	for p := range t {
		names = append(names, p)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		e := t[p]
		h := &tar.Header{Typeflag: e.typ, Name: p, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Linkname: e.link}
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// paths returns a copy of the tree's keys, so that tar can add parent
// folders while it walks them.
func (t fileTree) paths() map[string]bool {
	m := make(map[string]bool, len(t))
	for p := range t {
		m[p] = true
	}
	return m
}
