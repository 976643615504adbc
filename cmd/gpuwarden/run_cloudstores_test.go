package main

// End-to-end tests of `gpuwarden run --sync gs://…` and `az://…` against
// the real emulators, fake-gcs-server and Azurite (internal/peertest
// starts them; required under GPUWARDEN_PEER_TESTS=1), and of
// --store-region.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"google.golang.org/api/iterator"
)

// rawStore is a cloud store reached with its own client, behind gpuwarden's
// back: what a test lists, forges and plants there.
type rawStore struct {
	flags []string
	env   []string
	keys  func(t *testing.T, prefix string) []string
	put   func(t *testing.T, key string, data []byte)
}

// gcsStore starts fake-gcs-server with bucket "ckpts" in europe-west3.
func gcsStore(t *testing.T) rawStore {
	f := peertest.StartFakeGCS(t, "EUROPE-WEST3")
	f.CreateBucket(t, "ckpts")
	t.Setenv("STORAGE_EMULATOR_HOST", f.Host) // for the raw client here
	ctx := context.Background()
	c, err := storage.NewClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b := c.Bucket("ckpts")
	return rawStore{
		flags: []string{"--sync", "gs://ckpts/job", "--cloud", "none"},
		env:   f.Env(),
		keys: func(t *testing.T, prefix string) []string {
			var out []string
			it := b.Objects(ctx, &storage.Query{Prefix: prefix})
			for {
				o, err := it.Next()
				if errors.Is(err, iterator.Done) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, o.Name)
			}
			sort.Strings(out)
			return out
		},
		put: func(t *testing.T, key string, data []byte) {
			w := b.Object(key).NewWriter(ctx)
			if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// azureStore starts Azurite with container "ckpts" in its development
// account.
func azureStore(t *testing.T) rawStore {
	a := peertest.StartAzurite(t)
	ctx := context.Background()
	c, err := azblob.NewClientFromConnectionString(a.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateContainer(ctx, "ckpts", nil); err != nil {
		t.Fatal(err)
	}
	return rawStore{
		flags: []string{"--sync", "az://" + peertest.AzuriteAccount + "/ckpts/job", "--cloud", "none"},
		env:   []string{"AZURE_STORAGE_CONNECTION_STRING=" + a.ConnectionString()},
		keys: func(t *testing.T, prefix string) []string {
			var out []string
			pager := c.NewListBlobsFlatPager("ckpts", &azblob.ListBlobsFlatOptions{Prefix: &prefix})
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range page.Segment.BlobItems {
					out = append(out, *b.Name)
				}
			}
			sort.Strings(out)
			return out
		},
		put: func(t *testing.T, key string, data []byte) {
			if _, err := c.UploadBuffer(ctx, "ckpts", key, data, nil); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// TestRunWithCloudStores: on gs:// and az:// every checkpoint reaches the
// store verified, --keep applies there and spares what gpuwarden did not
// write, and a fresh box resumes the newest checkpoint that still
// verifies, skipping a forged newer one.
func TestRunWithCloudStores(t *testing.T) {
	for _, tt := range []struct {
		name  string
		start func(t *testing.T) rawStore
	}{
		{"gs", gcsStore},
		{"az", azureStore},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.start(t)
			s.put(t, "job/NOTES.txt", []byte("not gpuwarden's"))
			first := t.TempDir()
			r := gwEnv(t, first, s.env, append(append(runArgs(first, "--keep", "2"), s.flags...), "--", trainer, "--steps", "100", "--every", "20", "--step-time", "1ms")...)
			rep := decodeReport(t, r.stdout)
			if r.code != 0 || rep.Result != "ok" || rep.Sync == nil || rep.Sync.Uploaded != 5 || !rep.Sync.Durable || rep.Sync.NewestDurable.Step != 100 {
				t.Fatalf("first box: exit %d result %s sync %+v\n%s", r.code, rep.Result, rep.Sync, r.stderr)
			}
			var names []string
			for _, k := range s.keys(t, "job/") {
				if strings.HasSuffix(k, "/manifest.json") {
					names = append(names, strings.TrimSuffix(strings.TrimPrefix(k, "job/"), "/manifest.json"))
				}
			}
			if len(names) != 2 || !strings.HasSuffix(names[1], "step-000100") || !slicesContain(s.keys(t, "job/"), "job/NOTES.txt") {
				t.Fatalf("the store holds %v and %v; want the newest 2 checkpoints and the foreign object", names, s.keys(t, "job/"))
			}
			// The newest one is forged in the store: the fresh box skips it.
			s.put(t, "job/"+names[1]+"/state.json", []byte(`{"step":100,"hash":"forged"}`))
			fresh := t.TempDir()
			final := filepath.Join(fresh, "final.json")
			r = gwEnv(t, fresh, s.env, append(append(runArgs(fresh, "--keep", "2"), s.flags...), "--", trainer, "--steps", "140", "--every", "20", "--step-time", "1ms", "--out", final)...)
			rep = decodeReport(t, r.stdout)
			if r.code != 0 || rep.Sync == nil || rep.Sync.Restored != names[0] || rep.Attempts[0].ResumedFrom != names[0] || !strings.Contains(r.stderr, "skip a stored checkpoint that does not verify") {
				t.Fatalf("fresh box: exit %d, sync %+v; want %s restored after skipping the forged one\n%s", r.code, rep.Sync, names[0], r.stderr)
			}
			if got, _ := os.ReadFile(final); string(got) != reference(t, 140) {
				t.Errorf("final state %s, want the uninterrupted run's", got)
			}
		})
	}
}

// TestRunStoreRegion: --store-region states where a store is, for a
// self-hosted S3 that reports us-east-1 whatever its place, and for an
// Azure account, whose location blob requests cannot learn.
func TestRunStoreRegion(t *testing.T) {
	endpoint, _ := s3Server(t)
	s3 := []string{"--sync", "s3://ckpts/job-1", "--s3-endpoint", endpoint, "--s3-insecure", "--s3-path-style", "--cloud", "none"}
	az := []string{"--sync", "az://somestorageacct/ckpts/job-1", "--cloud", "none"}
	for _, tt := range []struct {
		name  string
		flags []string
		code  int
		want  string
	}{
		{"a German MinIO stated as DE", append(s3, "--store-region", "DE"), 0, ""},
		{"a German MinIO stated by region", append(s3, "--store-region", "eu-central-1"), 0, ""},
		{"a self-hosted store that says nothing", s3, 2, "us-east-1 (US), outside the plan's allowed countries (DE)"},
		{"a store stated elsewhere", append(s3, "--store-region", "us-east-2"), 2, "us-east-2 (US), outside the plan's allowed countries (DE)"},
		{"an Azure account without a stated place", az, 2, "--store-region"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			plan := "workload: {kind: notebook}\nwork_hours: 10\nbudget: {monthly_limit: 100}\nresidency: {countries: [DE]}\n"
			if err := os.WriteFile(filepath.Join(dir, "gpuwarden.yaml"), []byte(plan), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append([]string{"AZURE_STORAGE_CONNECTION_STRING="}, s3Env...)
			r := gwEnv(t, dir, env, append(append([]string{"run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt")}, tt.flags...),
				"--", trainer, "--steps", "20", "--every", "10", "--step-time", "1ms")...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, want %d and %q:\n%s", r.code, tt.code, tt.want, r.stderr)
			}
		})
	}
}
