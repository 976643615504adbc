package peertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// FakeGCS is a running fake-gcs-server: Google Cloud Storage's JSON and
// upload APIs over plain http, in memory.
type FakeGCS struct {
	*Process
	// Host is host:port, for STORAGE_EMULATOR_HOST.
	Host string
}

// StartFakeGCS runs fake-gcs-server on a free loopback port, its buckets
// in location (a GCS location such as "EUROPE-WEST3"), and waits until it
// lists buckets.
func StartFakeGCS(t testing.TB, location string) *FakeGCS {
	t.Helper()
	bin, err := Binary("fake-gcs-server")
	if err != nil {
		missing(t, "fake-gcs-server", err.Error())
	}
	port := strconv.Itoa(FreePort(t))
	host := "127.0.0.1:" + port
	// external-url and public-host make the upload and media links it hands
	// out point back at this port rather than at storage.googleapis.com.
	p := start(t, t.TempDir(), bin, nil, "-scheme", "http", "-host", "127.0.0.1", "-port", port,
		"-backend", "memory", "-public-host", host, "-external-url", "http://"+host,
		"-location", location, "-log-level", "warn")
	f := &FakeGCS{Process: p, Host: host}
	waitHTTP(t, p, 30*time.Second, func() bool {
		res, err := http.Get("http://" + host + "/storage/v1/b")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return f
}

// Env is the environment the official client reads the emulator from.
func (f *FakeGCS) Env() []string { return []string{"STORAGE_EMULATOR_HOST=" + f.Host} }

// CreateBucket creates a bucket through the JSON API's buckets.insert, as
// gcloud storage buckets create would; fake-gcs-server puts every bucket in
// the location it was started with.
func (f *FakeGCS) CreateBucket(t testing.TB, name string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"name": name})
	res, err := http.Post("http://"+f.Host+"/storage/v1/b?project=gpuwarden-test", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(res.Body)
		t.Fatalf("create bucket %s: status %d: %s\n%s", name, res.StatusCode, b.String(), f.Log())
	}
}

// AzuriteAccount and AzuriteKey are Azurite's well-known development
// account, the one every Azure Storage emulator accepts.
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Azurite is a running Azurite blob service.
type Azurite struct {
	*Process
	// Endpoint is the blob endpoint, http://127.0.0.1:PORT/devstoreaccount1.
	Endpoint string
}

// StartAzurite runs Azurite's blob service on a free loopback port over a
// fresh folder, without telemetry, and waits until it answers.
func StartAzurite(t testing.TB) *Azurite {
	t.Helper()
	bin, err := Binary("azurite-blob")
	if err != nil {
		missing(t, "Azurite", err.Error())
	}
	port := strconv.Itoa(FreePort(t))
	dir := t.TempDir()
	// skipApiVersionCheck: the Go SDK may speak a newer service version
	// than this Azurite knows; the calls gpuwarden makes are old ones.
	p := start(t, dir, bin, []string{"HOME=" + dir}, "--blobHost", "127.0.0.1", "--blobPort", port,
		"--location", dir, "--silent", "--skipApiVersionCheck", "--disableTelemetry", "--loose")
	a := &Azurite{Process: p, Endpoint: fmt.Sprintf("http://127.0.0.1:%s/%s", port, AzuriteAccount)}
	waitHTTP(t, p, 60*time.Second, func() bool {
		// Any answer, even 403 to an unsigned request, means it listens.
		res, err := http.Get(a.Endpoint + "?comp=list")
		if err != nil {
			return false
		}
		res.Body.Close()
		return true
	})
	return a
}

// ConnectionString is the development account's connection string for
// this server, for AZURE_STORAGE_CONNECTION_STRING.
func (a *Azurite) ConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + AzuriteAccount + ";AccountKey=" + AzuriteKey + ";BlobEndpoint=" + a.Endpoint + ";"
}
