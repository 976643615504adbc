package preempt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	// gcpMigrate is the value for a live migration, which processes survive.
	gcpMigrate = "MIGRATE_ON_HOST_MAINTENANCE"
	// gcpTerminate is the value for a stop for host maintenance.
	gcpTerminate = "TERMINATE_ON_HOST_MAINTENANCE"
	// gcpMachineTypePath is projects/NUMBER/machineTypes/TYPE, and
	// gcpOnHostPath the VM's host maintenance policy, MIGRATE or TERMINATE
	// (Google's "Predefined metadata keys"). The metadata server lists no
	// accelerators: the machine type tells accelerator-optimized VMs, the
	// box itself an N1 with attached GPUs.
	gcpMachineTypePath = "/computeMetadata/v1/instance/machine-type"
	gcpOnHostPath      = "/computeMetadata/v1/instance/scheduling/on-host-maintenance"

	// GCPPreemptedID is the ID of the preemption notice: a VM is preempted
	// once per life.
	GCPPreemptedID = "gcp-preempted"
	// GCPPreemptionNotice is how long before the stop GCP sets preempted,
	// as its documentation gives it: At is the first poll that saw TRUE
	// plus this.
	GCPPreemptionNotice = 30 * time.Second
	// GCPMaintenanceNotice is how long before the event GCP sets
	// maintenance-event, as its documentation gives it: At is the first poll
	// that saw the value plus this.
	GCPMaintenanceNotice = 60 * time.Second
	// GCPGPUMaintenanceNotice is the notice of TERMINATE_ON_HOST_MAINTENANCE
	// on a VM with GPUs: "Compute Engine gives GPU VMs a 1-hour stopping
	// notice, while normal VMs receive only a 60-second notice"
	// (https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance).
	// Taking it as 60 s would stop the job at once and leave the GPUs idle
	// for up to an hour; with it the job is stopped at At less the lead.
	GCPGPUMaintenanceNotice = time.Hour
)

// gcpGPUFamilies are the accelerator-optimized machine families, whose
// types come with GPUs attached (A2, A3, A4, A4X, G2, G4).
var gcpGPUFamilies = []string{"a2", "a3", "a4", "a4x", "g2", "g4"}

// localNVIDIAGPUs reports whether the NVIDIA driver lists a GPU on this
// box, the sign of GPUs attached to a machine type that has none of its own.
func localNVIDIAGPUs() bool {
	entries, err := os.ReadDir("/proc/driver/nvidia/gpus")
	return err == nil && len(entries) > 0
}

// gcpVM is what the metadata server says about the VM's kind, read once.
type gcpVM struct {
	known bool
	// gpu: GPUs are attached, so TERMINATE_ON_HOST_MAINTENANCE comes an
	// hour ahead.
	gpu bool
}

// GCP polls the Compute Engine metadata server. Plain polls every second
// suffice: preempted stays TRUE until the VM stops (about 30 s) and
// maintenance-event changes 60 s ahead, so no change can fall between two
// polls, and wait_for_change would need one hanging request per key.
//
// GCP says neither when a preemption nor when maintenance happens, only that
// it is coming, so At is derived from the first poll that saw the value and
// the notice GCP documents, and then kept, so that it does not move.
type GCP struct {
	// Now is the clock that dates first sightings, a field so tests can fix it.
	Now func() time.Time
	// LocalGPUs reports whether GPUs are attached to a VM whose machine
	// type does not come with them (an N1 with GPUs); the default asks the
	// NVIDIA driver (/proc/driver/nvidia/gpus). A field so tests can set it.
	LocalGPUs func() bool

	client *http.Client
	base   string

	mu          sync.Mutex
	preemptedAt time.Time
	// maint is the maintenance window now reported and maintVal its value,
	// NONE when there is none. maintSeq numbers the windows, so that a second
	// window with the same value is a new notice and one window is one notice.
	maint    gpuwarden.Notice
	maintVal string
	maintSeq int
	vm       gcpVM
}

// NewGCP returns a Source for the metadata server at base; a nil client means
// NewClient().
func NewGCP(client *http.Client, base string) *GCP {
	return &GCP{Now: time.Now, LocalGPUs: localNVIDIAGPUs, client: newClientIfNil(client), base: trimBase(base), maintVal: gcpNoMaintenance}
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
// Google adds later). TRUE is a preemption with ID GCPPreemptedID at
// GCPPreemptionNotice after the first poll that saw it, never canceled.
// MIGRATE_ON_HOST_MAINTENANCE is a migration, any other value maintenance,
// each window under its own "gcp-maintenance-N" at GCPMaintenanceNotice
// after the first poll that saw the value (GCP documents 60 s), except
// TERMINATE_ON_HOST_MAINTENANCE on a GPU VM, which Google announces
// GCPGPUMaintenanceNotice ahead. A GPU VM is one whose
// scheduling/on-host-maintenance is TERMINATE (GPUs cannot live-migrate)
// and whose machine type is accelerator-optimized or whose box shows GPUs;
// both keys are read once, until read, and while unread the 60 s notice,
// the one that stops the job sooner, holds. A window is canceled once when
// the value goes back to NONE (or the key vanishes) or changes to another
// value, which opens the next window.
func (g *GCP) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	var notices []gpuwarden.Notice
	var errs []error

	v, ok, err := g.value(ctx, gcpPreemptedPath)
	switch {
	case err != nil:
		errs = append(errs, err)
	case !ok, v == "FALSE":
	case v == "TRUE":
		g.mu.Lock()
		if g.preemptedAt.IsZero() {
			g.preemptedAt = g.Now().UTC().Add(GCPPreemptionNotice)
		}
		at := g.preemptedAt
		g.mu.Unlock()
		notices = append(notices, gpuwarden.Notice{
			Provider: ProviderGCP, Kind: gpuwarden.NoticePreemption, At: at,
			Detail: "instance/preempted=TRUE", ID: GCPPreemptedID,
		})
	default:
		errs = append(errs, pathError(ProviderGCP, gcpPreemptedPath, fmt.Errorf("want TRUE or FALSE, got %s", snippet([]byte(v)))))
	}
	if ctx.Err() != nil {
		return notices, errors.Join(append(errs, ctx.Err())...)
	}

	if err := g.readVM(ctx); err != nil {
		errs = append(errs, err)
	}
	v, ok, err = g.value(ctx, gcpMaintenancePath)
	switch {
	case err != nil:
		errs = append(errs, err)
	case v == "" && ok:
		errs = append(errs, pathError(ProviderGCP, gcpMaintenancePath, errors.New("empty value")))
	default:
		if !ok {
			v = gcpNoMaintenance
		}
		notices = append(notices, g.maintenance(v)...)
	}
	return notices, errors.Join(errs...)
}

// readVM reads the machine type and the host maintenance policy, once both
// have answered; a key the server does not have (404) reads as empty.
func (g *GCP) readVM(ctx context.Context) error {
	g.mu.Lock()
	known := g.vm.known
	g.mu.Unlock()
	if known {
		return nil
	}
	mt, _, err := g.value(ctx, gcpMachineTypePath)
	if err != nil {
		return err
	}
	onHost, _, err := g.value(ctx, gcpOnHostPath)
	if err != nil {
		return err
	}
	mt = mt[strings.LastIndex(mt, "/")+1:]
	family, _, _ := strings.Cut(mt, "-")
	gpu := onHost == "TERMINATE" && (slices.Contains(gcpGPUFamilies, family) || (g.LocalGPUs != nil && g.LocalGPUs()))
	g.mu.Lock()
	g.vm = gcpVM{known: true, gpu: gpu}
	g.mu.Unlock()
	return nil
}

// maintenance turns one maintenance-event value into the notices of this
// poll: the end of the window reported before, when the value left it, and
// the window the value names, unless it is NONE.
func (g *GCP) maintenance(v string) []gpuwarden.Notice {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v == g.maintVal {
		if v == gcpNoMaintenance {
			return nil
		}
		return []gpuwarden.Notice{g.maint}
	}
	var out []gpuwarden.Notice
	if g.maintVal != gcpNoMaintenance {
		why := "maintenance-event back to NONE"
		if v != gcpNoMaintenance {
			why = "maintenance-event now " + v
		}
		out = append(out, canceled(g.maint, g.maintVal+" ended: "+why))
	}
	g.maintVal = v
	if v == gcpNoMaintenance {
		g.maint = gpuwarden.Notice{}
		return out
	}
	g.maintSeq++
	kind := gpuwarden.NoticeMaintenance
	if v == gcpMigrate {
		kind = gpuwarden.NoticeMigration
	}
	notice, detail := GCPMaintenanceNotice, v
	if v == gcpTerminate && g.vm.gpu {
		notice, detail = GCPGPUMaintenanceNotice, v+" (a GPU VM: 1-hour notice)"
	}
	g.maint = gpuwarden.Notice{
		Provider: ProviderGCP, Kind: kind, At: g.Now().UTC().Add(notice),
		Detail: detail, ID: "gcp-maintenance-" + strconv.Itoa(g.maintSeq),
	}
	return append(out, g.maint)
}
