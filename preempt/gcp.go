package preempt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/gpuwarden/gpuwarden"
)

// The GCP metadata keys and the header that the metadata server requires on
// every request and sets on every response.
const (
	gcpPreemptedPath   = "/computeMetadata/v1/instance/preempted"
	gcpMaintenancePath = "/computeMetadata/v1/instance/maintenance-event"
	gcpFlavorHeader    = "Metadata-Flavor"
	gcpFlavor          = "Google"
	// gcpNoMaintenance is maintenance-event's value when nothing is coming.
	gcpNoMaintenance = "NONE"
)

// GCP polls the Compute Engine metadata server. Plain polls every second
// suffice: preempted stays TRUE until the VM stops (about 30 s) and
// maintenance-event changes 60 s ahead, so no change can fall between two
// polls, and wait_for_change would need one hanging request per key.
type GCP struct {
	client *http.Client
	base   string

	mu sync.Mutex
	// lastMaint and maintSeq number each maintenance window, so that a second
	// window with the same value is a new notice and one window is one notice.
	lastMaint string
	maintSeq  int
}

// NewGCP returns a Source for the metadata server at base; a nil client means
// NewClient().
func NewGCP(client *http.Client, base string) *GCP {
	return &GCP{client: newClientIfNil(client), base: trimBase(base), lastMaint: gcpNoMaintenance}
}

// Provider returns "gcp".
func (g *GCP) Provider() string { return ProviderGCP }

// value reads one key's text value; ok=false when the key does not exist on
// this VM (404). A response without Metadata-Flavor: Google is not the metadata
// server, whatever it says.
func (g *GCP) value(ctx context.Context, path string) (string, bool, error) {
	res, err := do(ctx, g.client, http.MethodGet, g.base+path, map[string]string{gcpFlavorHeader: gcpFlavor})
	if err != nil {
		return "", false, pathError(ProviderGCP, path, err)
	}
	if res.header.Get(gcpFlavorHeader) != gcpFlavor {
		return "", false, pathError(ProviderGCP, path, fmt.Errorf("response lacks %s: %s (status %d)", gcpFlavorHeader, gcpFlavor, res.status))
	}
	switch res.status {
	case http.StatusOK:
	case http.StatusNotFound:
		return "", false, nil
	default:
		return "", false, pathError(ProviderGCP, path, statusError(res))
	}
	return strings.TrimSpace(string(res.body)), true, nil
}

// probe checks that base is the metadata server: any answer carrying
// Metadata-Flavor: Google is, whatever its status.
func (g *GCP) probe(ctx context.Context) error {
	res, err := do(ctx, g.client, http.MethodGet, g.base+gcpPreemptedPath, map[string]string{gcpFlavorHeader: gcpFlavor})
	if err != nil {
		return pathError(ProviderGCP, gcpPreemptedPath, err)
	}
	if res.header.Get(gcpFlavorHeader) != gcpFlavor {
		return pathError(ProviderGCP, gcpPreemptedPath, fmt.Errorf("response lacks %s: %s (status %d)", gcpFlavorHeader, gcpFlavor, res.status))
	}
	return nil
}

// Poll reads instance/preempted (TRUE or FALSE) and instance/maintenance-event
// (NONE, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE, or a value
// Google adds later, which counts as maintenance too).
func (g *GCP) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	var notices []gpuwarden.Notice
	var errs []error

	v, ok, err := g.value(ctx, gcpPreemptedPath)
	switch {
	case err != nil:
		errs = append(errs, err)
	case !ok, v == "FALSE":
	case v == "TRUE":
		// Preemption happens once per VM life, so one fixed ID is right.
		notices = append(notices, gpuwarden.Notice{
			Provider: ProviderGCP, Kind: gpuwarden.NoticePreemption,
			Detail: "instance/preempted=TRUE", ID: "gcp-preempted",
		})
	default:
		errs = append(errs, pathError(ProviderGCP, gcpPreemptedPath, fmt.Errorf("want TRUE or FALSE, got %s", snippet([]byte(v)))))
	}
	if ctx.Err() != nil {
		return notices, errors.Join(append(errs, ctx.Err())...)
	}

	v, ok, err = g.value(ctx, gcpMaintenancePath)
	switch {
	case err != nil:
		errs = append(errs, err)
	case !ok || v == gcpNoMaintenance:
		g.mu.Lock()
		g.lastMaint = gcpNoMaintenance
		g.mu.Unlock()
	case v == "":
		errs = append(errs, pathError(ProviderGCP, gcpMaintenancePath, errors.New("empty value")))
	default:
		g.mu.Lock()
		if v != g.lastMaint {
			g.lastMaint = v
			g.maintSeq++
		}
		id := "gcp-maintenance-" + strconv.Itoa(g.maintSeq)
		g.mu.Unlock()
		notices = append(notices, gpuwarden.Notice{
			Provider: ProviderGCP, Kind: gpuwarden.NoticeMaintenance, Detail: v, ID: id,
		})
	}
	return notices, errors.Join(errs...)
}
