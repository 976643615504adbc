package packaging

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// ociDescriptor is a descriptor of the OCI image spec (image-spec
// descriptor.md): the tests read the layout with the standard library
// only, apart from the go-containerregistry code that wrote it.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	} `json:"platform"`
}

// blob reads a blob of an OCI layout and checks its digest and size.
func blob(t testing.TB, layout string, d ociDescriptor) []byte {
	t.Helper()
	algo, hexsum, ok := strings.Cut(d.Digest, ":")
	if !ok || algo != "sha256" {
		t.Fatalf("digest %q: want sha256:…", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", hexsum))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexsum || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: sha256 %x, %d bytes; the descriptor says %d bytes", d.Digest, sum, len(b), d.Size)
	}
	return b
}

func unmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// imageConfig is the part of the OCI image config (image-spec config.md)
// the tests check.
type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Created      string `json:"created"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
}

// TestImage reads the OCI layout (index → per-platform index → manifest →
// config and layers, each blob's digest checked), checks the user and the
// labels of each architecture's image, unpacks the host's one into a
// folder and runs its /gpuwarden version there with chroot, as root and as
// the image's user 65532.
func TestImage(t *testing.T) {
	r := packaged(t)
	layout := filepath.Join(r.dir, "oci")
	var top struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	unmarshal(t, b, &top)
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testVersion {
		t.Fatalf("index.json: %+v; want one image index named %s", top.Manifests, testVersion)
	}
	var idx struct {
		MediaType   string            `json:"mediaType"`
		Manifests   []ociDescriptor   `json:"manifests"`
		Annotations map[string]string `json:"annotations"`
	}
	unmarshal(t, blob(t, layout, top.Manifests[0]), &idx)
	var platforms []string
	for _, m := range idx.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	var want []string
	for _, a := range r.arches {
		want = append(want, "linux/"+a)
	}
	if !slices.Equal(platforms, want) {
		t.Errorf("the image index has %v, want %v", platforms, want)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/gpuwarden/gpuwarden",
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": r.commit,
		"org.opencontainers.image.created":  r.date,
		"org.opencontainers.image.licenses": "NOASSERTION",
	}
	for k, v := range wantLabels {
		if idx.Annotations[k] != v {
			t.Errorf("index annotation %s = %q, want %q", k, idx.Annotations[k], v)
		}
	}

	for _, m := range idx.Manifests {
		arch := m.Platform.Architecture
		t.Run(arch, func(t *testing.T) {
			var man struct {
				Config ociDescriptor   `json:"config"`
				Layers []ociDescriptor `json:"layers"`
			}
			unmarshal(t, blob(t, layout, m), &man)
			var cfg imageConfig
			unmarshal(t, blob(t, layout, man.Config), &cfg)
			if cfg.Config.User != "65532:65532" {
				t.Errorf("config User = %q, want 65532:65532", cfg.Config.User)
			}
			if cfg.Architecture != arch || cfg.OS != "linux" || cfg.Created != r.date {
				t.Errorf("config says %s/%s created %s, want linux/%s created %s (the commit's time)", cfg.OS, cfg.Architecture, cfg.Created, arch, r.date)
			}
			if !slices.Equal(cfg.Config.Entrypoint, []string{"/gpuwarden"}) {
				t.Errorf("entrypoint %v, want [/gpuwarden]", cfg.Config.Entrypoint)
			}
			for k, v := range wantLabels {
				if cfg.Config.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, cfg.Config.Labels[k], v)
				}
			}
			rootfs := t.TempDir()
			for _, l := range man.Layers {
				if err := untar(blob(t, layout, l), rootfs); err != nil {
					t.Fatalf("layer %s: %v", l.Digest, err)
				}
			}
			passwd, err := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
			if err != nil || !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd has no nonroot user 65532 (%v):\n%s", err, passwd)
			}
			if fi, err := os.Stat(filepath.Join(rootfs, "etc", "ssl", "certs", "ca-certificates.crt")); err != nil || fi.Size() < 1000 {
				t.Errorf("no CA certificates in the image: %v", err)
			}
			f, err := elf.Open(filepath.Join(rootfs, "gpuwarden"))
			if err != nil {
				t.Fatal(err)
			}
			machine := f.Machine
			f.Close()
			if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; machine != want {
				t.Errorf("/gpuwarden is built for %v, want %v", machine, want)
			}
			if arch != runtime.GOARCH {
				return
			}
			if os.Geteuid() != 0 {
				if peersFatal {
					t.Fatal("running the image's binary in its own filesystem needs chroot: run as root")
				}
				t.Skip("chroot needs root")
			}
			need(t, "chroot", "runs the binary inside the unpacked image")
			// Only the image's files: no library of the host can help it.
			checkVersion(t, r, "chroot", rootfs, "/gpuwarden")
			checkVersion(t, r, "chroot", "--userspec=65532:65532", rootfs, "/gpuwarden")
		})
	}
}

// untar unpacks a gzipped layer into dir: folders, files and symbolic
// links, no path that leaves dir.
func untar(layer []byte, dir string) error {
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%q leaves the root", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
				return err
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(p, b, os.FileMode(h.Mode&0o777)); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry type %q not expected in this image", h.Name, h.Typeflag)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
		}
	}
}

// modeBits turns the tar sticky bit into Go's (/tmp is 1777).
func modeBits(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

// TestImageArchiveIsTheLayout checks that the .oci.tar in dist holds the
// same layout as dist/oci, at its root (what skopeo's oci-archive: reads).
func TestImageArchiveIsTheLayout(t *testing.T) {
	r := packaged(t)
	f, err := os.Open(filepath.Join(r.dir, "gpuwarden_"+testVersion+"_image.oci.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		got, _ := io.ReadAll(tr)
		want, err := os.ReadFile(filepath.Join(r.dir, "oci", h.Name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the .oci.tar differs from dist/oci (%v)", h.Name, err)
		}
		n++
	}
	files := 0
	for _, p := range treeOf(t, filepath.Join(r.dir, "oci")) {
		if fi, err := os.Stat(filepath.Join(r.dir, "oci", p)); err == nil && fi.Mode().IsRegular() {
			files++
		}
	}
	if n != files || n < 3 {
		t.Errorf("the .oci.tar holds %d files, dist/oci %d; want the same, at least oci-layout, index.json and a blob", n, files)
	}
}
