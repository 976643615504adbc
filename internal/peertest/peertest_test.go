package peertest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAEMMServesASpotNotice checks the harness against the real mock: a
// token, then the instance-action document through it.
func TestAEMMServesASpotNotice(t *testing.T) {
	a := StartAEMM(t, "spot", "--time", "2030-01-01T00:00:00Z")
	tok, err := a.Token()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, a.URL+"/latest/meta-data/spot/instance-action", nil)
	req.Header.Set("X-aws-ec2-metadata-token", tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "2030-01-01T00:00:00Z") {
		t.Fatalf("status %d body %s", res.StatusCode, b)
	}
}
