package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Ledger state keys of the shipper's cursors: what the server has
// acknowledged. The ledger itself is the durable queue — events and samples
// are already there — so nothing is copied and nothing is lost while the
// server is away; a replay after a lost answer is dropped by the server.
const (
	shipEventsKey  = "fleet.events.after"
	shipMinutesKey = "fleet.minutes.next"
	// shipSavingsKey is the newest recording time (Saving.At) shipped: an
	// event re-priced later is recorded, and so shipped, again.
	shipSavingsKey = "fleet.savings.at"
)

// shipBatchItems and shipBatchBytes keep a batch well under the server's
// body limit (1 MiB by default); shipBatchBytes counts the events as JSON,
// as they go on the wire.
const (
	shipBatchItems = 500
	shipBatchBytes = 512 << 10
)

// Shipper reports the agent to a fleet server: it registers the node,
// sends a heartbeat every HeartbeatEvery and ships the ledger's new events
// and complete minutes every ShipEvery, retrying with backoff while the
// server is away.
type Shipper struct {
	Uplink gpuwarden.Uplink
	Ledger gpuwarden.Ledger
	Node   gpuwarden.Node
	// Status supplies the heartbeat's content.
	Status         func() gpuwarden.AgentStatus
	HeartbeatEvery time.Duration
	ShipEvery      time.Duration
	Now            func() time.Time
	Log            *slog.Logger
	// ShuttingDown says whether the OS is shutting down, for the last
	// heartbeat of an agent that did not stop the box itself (default:
	// systemd's state is "stopping").
	ShuttingDown func() bool

	// lastState is the state of the last heartbeat sent: a change (the
	// box stopped) is sent at once, not at the next HeartbeatEvery.
	lastState string

	registered bool
	failures   int
	// refusedSeq is the event the server last refused on its own; it is
	// skipped only if refused alone again in a later round.
	refusedSeq int64
}

// Run ships until ctx ends, then sends a last "stopped" heartbeat and what
// is left, so that the server knows the box went away on purpose.
func (s *Shipper) Run(ctx context.Context) {
	if s.HeartbeatEvery <= 0 {
		s.HeartbeatEvery = 15 * time.Second
	}
	if s.ShipEvery <= 0 {
		s.ShipEvery = 10 * time.Second
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	var nextBeat, nextShip time.Time
	for {
		now := s.Now()
		wait := time.Duration(0)
		if err := s.step(ctx, now, &nextBeat, &nextShip); err != nil {
			s.failures++
			wait = backoff(s.failures, rand.Float64())
			// A conflict will not pass by itself soon (another box holds
			// the node ID, or another token): an error, with what to do.
			level := slog.LevelWarn
			if gpuwarden.ErrorCodeOf(err) == gpuwarden.EConflict {
				level = slog.LevelError
			}
			attrs := []any{"err", err, "retry_in", wait}
			if h := gpuwarden.ErrorHint(err); h != "" {
				attrs = append(attrs, "hint", h)
			}
			s.Log.Log(ctx, level, "report to the fleet server", attrs...)
		} else {
			s.failures = 0
			wait = min(nextBeat.Sub(now), nextShip.Sub(now))
		}
		t := time.NewTimer(max(wait, 10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			s.farewell()
			return
		case <-t.C:
		}
	}
}

func (s *Shipper) step(ctx context.Context, now time.Time, nextBeat, nextShip *time.Time) error {
	if !s.registered {
		n, err := s.Uplink.Register(ctx, s.Node)
		if err != nil {
			return fmt.Errorf("register: %w", err)
		}
		s.registered = true
		s.Log.Info("registered with the fleet server", "node", n.ID, "project", n.Project)
	}
	hb := s.heartbeat(gpuwarden.NodeRunning)
	if !now.Before(*nextBeat) || hb.State != s.lastState {
		if err := s.Uplink.Heartbeat(ctx, hb); err != nil {
			if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
				s.registered = false // the server lost the node: register again
			}
			return fmt.Errorf("heartbeat: %w", err)
		}
		s.lastState = hb.State
		*nextBeat = now.Add(s.HeartbeatEvery)
	}
	if !now.Before(*nextShip) {
		if err := s.Ship(ctx, now); err != nil {
			return err
		}
		*nextShip = now.Add(s.ShipEvery)
	}
	return nil
}

// farewell tells the server the agent stopped and ships the last events
// (the stop itself), within a few seconds so that shutdown never hangs.
func (s *Shipper) farewell() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !s.registered {
		return
	}
	if err := s.Ship(ctx, s.Now()); err != nil {
		s.Log.Warn("ship before stopping", "err", err)
	}
	if err := s.Uplink.Heartbeat(ctx, s.goodbye()); err != nil {
		s.Log.Warn("last heartbeat", "err", err)
	}
}

// goodbye is the last heartbeat: what the stop did when the agent stopped
// the box; else, while the OS shuts down, what an OS shutdown does to this
// provider's bill (gpuwarden.StopsComputeBilling); else the agent alone
// stopped and the box may run on.
func (s *Shipper) goodbye() gpuwarden.Heartbeat {
	hb := s.heartbeat(gpuwarden.NodeAgentStopped)
	if hb.State != gpuwarden.NodeAgentStopped {
		return hb // the agent stopped the box: its outcome says how
	}
	shuttingDown := s.ShuttingDown
	if shuttingDown == nil {
		shuttingDown = systemStopping
	}
	if !shuttingDown() {
		return hb
	}
	stops, why := gpuwarden.StopsComputeBilling(s.Node.Labels.Provider, gpuwarden.StopOSShutdown)
	out := gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown, At: hb.Time, Billing: gpuwarden.NodePoweredOffStillBilling,
		Detail: "the OS shut down, not by gpuwarden: " + why}
	if stops {
		out.Billing = gpuwarden.NodeStopped
	}
	if hb.Stop == nil {
		hb.Stop = &gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown, StopsBilling: stops, Why: why}
	}
	hb.Stop.Outcome = &out
	hb.State = out.Billing
	return hb
}

// systemStopping reports whether systemd is shutting the OS down.
func systemStopping() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, "systemctl", "is-system-running").Output()
	return strings.TrimSpace(string(out)) == "stopping"
}

// heartbeat is the box now; state is replaced by the stop's outcome once
// the agent stopped the box.
func (s *Shipper) heartbeat(state string) gpuwarden.Heartbeat {
	st := s.Status()
	if st.Stop != nil && st.Stop.Outcome != nil && st.Stop.Outcome.Billing != "" && st.Stop.Outcome.Billing != gpuwarden.NodeRunning {
		state = st.Stop.Outcome.Billing
	}
	hb := gpuwarden.Heartbeat{Node: s.Node.ID, Time: s.Now().UTC(), State: state, IdleSince: st.Idle.Since,
		Diagnosis: st.Diagnosis.Verdict, Stop: st.Stop}
	// The average is over the GPUs whose utilization is known: a MIG card
	// or a GPU that did not answer would pull it toward an idle-looking 0.
	var sum float64
	known := 0
	for _, g := range st.Last.GPUs {
		if g.Known(gpuwarden.FieldUtil) {
			sum += g.UtilPercent
			known++
		}
	}
	if known > 0 {
		hb.GPUUtil = clampPercent(sum / float64(known))
	}
	return hb
}

// Ship sends every event and complete minute the server has not
// acknowledged, in batches, advancing the cursors after each answer.
func (s *Shipper) Ship(ctx context.Context, now time.Time) error {
	if err := s.shipEvents(ctx); err != nil {
		return err
	}
	if err := s.shipMinutes(ctx, now); err != nil {
		return err
	}
	return s.ShipSavings(ctx)
}

// ShipSavings sends the savings recorded since the last ones the server
// acknowledged; the server stores them by ID, so a replay replaces.
func (s *Shipper) ShipSavings(ctx context.Context) error {
	sl, ok := s.Ledger.(gpuwarden.SavingsLedger)
	if !ok {
		return nil
	}
	var after time.Time
	if v, ok, err := s.Ledger.State(ctx, shipSavingsKey); err != nil {
		return fmt.Errorf("read the savings cursor: %w", err)
	} else if ok && v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return fmt.Errorf("savings cursor %q: %w", v, err)
		}
	}
	fresh, err := sl.Savings(ctx, gpuwarden.SavingsQuery{Node: s.Node.ID, RecordedAfter: after})
	if err != nil {
		return fmt.Errorf("read savings to ship: %w", err)
	}
	slices.SortFunc(fresh, func(a, b gpuwarden.Saving) int { return a.At.Compare(b.At) })
	for len(fresh) > 0 {
		n := min(len(fresh), shipBatchItems)
		if err := s.send(ctx, gpuwarden.FleetBatch{Savings: fresh[:n]}, n); err != nil {
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				return err
			}
			// A server that refuses them (one older than the savings
			// ledger) must not hold up the heartbeats: they stay in this
			// box's ledger, where `report savings` reads them.
			s.Log.Error("the fleet server refuses savings; they stay in this box's ledger", "events", n, "err", err)
		}
		if err := s.Ledger.SetState(ctx, shipSavingsKey, fresh[n-1].At.UTC().Format(time.RFC3339Nano)); err != nil {
			return fmt.Errorf("keep the savings cursor: %w", err)
		}
		fresh = fresh[n:]
	}
	return nil
}

func (s *Shipper) shipEvents(ctx context.Context) error {
	after, err := s.cursorInt(ctx, shipEventsKey)
	if err != nil {
		return err
	}
	for {
		evs, err := s.Ledger.EventsAfter(ctx, after, shipBatchItems)
		if err != nil {
			return fmt.Errorf("read events to ship: %w", err)
		}
		if len(evs) == 0 {
			return nil
		}
		evs = fitBatch(evs)
		for {
			err := s.send(ctx, gpuwarden.FleetBatch{Events: evs}, len(evs))
			if err == nil {
				break
			}
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				return err
			}
			// The server refuses something in the batch: halve it to find
			// the event, and skip that one alone so that the queue moves.
			if len(evs) > 1 {
				evs = evs[:len(evs)/2]
				continue
			}
			// EInvalid is also how a rate limit (429) or a proxy's 4xx
			// comes back, which is about the request, not the event: skip
			// only an event refused alone in two rounds, a backoff apart,
			// while the server takes an empty batch.
			if s.refusedSeq != evs[0].Seq {
				s.refusedSeq = evs[0].Seq
				return err
			}
			if perr := s.send(ctx, gpuwarden.FleetBatch{}, 0); perr != nil {
				return err
			}
			s.Log.Error("the fleet server refuses an event; skipping it", "seq", evs[0].Seq, "kind", evs[0].Kind, "err", err)
			break
		}
		after = evs[len(evs)-1].Seq
		if err := s.Ledger.SetState(ctx, shipEventsKey, strconv.FormatInt(after, 10)); err != nil {
			return fmt.Errorf("keep the events cursor: %w", err)
		}
	}
}

// fitBatch cuts oversized events and keeps the batch under the byte
// budget; it always keeps at least one event so that the queue moves.
func fitBatch(evs []gpuwarden.Event) []gpuwarden.Event {
	total := 0
	for i := range evs {
		evs[i] = fitEvent(evs[i])
		size := len(evs[i].Message) + evs[i].DataSize()
		if b, err := json.Marshal(evs[i]); err == nil {
			size = len(b) // escaping can make the wire size much larger
		}
		total += size
		if total > shipBatchBytes && i > 0 {
			return evs[:i]
		}
	}
	return evs
}

// fitEvent cuts an event's message and data to what the server takes,
// rather than have it refused and skipped: a burn-in report loses its
// telemetry trace first; otherwise the short data values (the verdict, the
// node) that fit are kept.
func fitEvent(e gpuwarden.Event) gpuwarden.Event {
	if len(e.Message) > gpuwarden.MaxEventMessage {
		e.Message = strings.ToValidUTF8(e.Message[:gpuwarden.MaxEventMessage], "")
	}
	size := e.DataSize()
	if size <= gpuwarden.MaxEventData {
		return e
	}
	if slim, ok := withoutTelemetry(e.Data["report"]); ok {
		cut := e
		cut.Data = maps.Clone(e.Data)
		cut.Data["report"] = slim
		cut.Data["truncated"] = "the report's telemetry trace was left out"
		if cut.DataSize() <= gpuwarden.MaxEventData {
			return cut
		}
	}
	note := fmt.Sprintf("%d bytes of data were too large to ship", size)
	data := map[string]string{"truncated": note}
	budget := gpuwarden.MaxEventData - len("truncated") - len(note)
	for _, k := range slices.Sorted(maps.Keys(e.Data)) {
		v := e.Data[k]
		if _, taken := data[k]; taken || len(v) > maxLabel || len(k)+len(v) > budget {
			continue
		}
		data[k] = v
		budget -= len(k) + len(v)
	}
	e.Data = data
	return e
}

// withoutTelemetry is a report (JSON) without its telemetry trace: a
// burn-in's GPU samples, which make a report too large to ship, while the
// server reads only its checks and results.
func withoutTelemetry(report string) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(report), &m) != nil {
		return "", false
	}
	if _, ok := m["telemetry"]; !ok {
		return "", false
	}
	delete(m, "telemetry")
	b, err := json.Marshal(m)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// maxLabel is the longest data value kept when an event's data is cut.
const maxLabel = 256

func (s *Shipper) shipMinutes(ctx context.Context, now time.Time) error {
	next := time.Time{}
	if v, ok, err := s.Ledger.State(ctx, shipMinutesKey); err != nil {
		return fmt.Errorf("read the minutes cursor: %w", err)
	} else if ok {
		if next, err = time.Parse(time.RFC3339, v); err != nil {
			return fmt.Errorf("minutes cursor %q: %w", v, err)
		}
	}
	samples, err := s.Ledger.Samples(ctx, next)
	if err != nil {
		return fmt.Errorf("read samples to ship: %w", err)
	}
	minutes := Minutes(samples, now.Truncate(time.Minute))
	for len(minutes) > 0 {
		n := min(len(minutes), shipBatchItems)
		if err := s.send(ctx, gpuwarden.FleetBatch{Minutes: minutes[:n]}, n); err != nil {
			return err
		}
		next = minutes[n-1].Minute.Add(time.Minute)
		if err := s.Ledger.SetState(ctx, shipMinutesKey, next.UTC().Format(time.RFC3339)); err != nil {
			return fmt.Errorf("keep the minutes cursor: %w", err)
		}
		minutes = minutes[n:]
	}
	return nil
}

func (s *Shipper) send(ctx context.Context, b gpuwarden.FleetBatch, n int) error {
	res, err := s.Uplink.Ship(ctx, s.Node.ID, b)
	if err != nil {
		if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
			s.registered = false
		}
		return fmt.Errorf("ship %d items: %w", n, err)
	}
	s.Log.Debug("shipped", "minutes", res.Minutes, "events", res.Events, "duplicates", res.Duplicates)
	return nil
}

func (s *Shipper) cursorInt(ctx context.Context, key string) (int64, error) {
	v, ok, err := s.Ledger.State(ctx, key)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cursor %s=%q: %w", key, v, err)
	}
	return n, nil
}

// Minutes averages samples into whole minutes before end, oldest first: a
// minute with a sample is a minute the box was up. Memory is the share of
// VRAM in use, the figure that tells an oversized card.
func Minutes(samples []gpuwarden.NodeSample, end time.Time) []gpuwarden.NodeMinute {
	var out []gpuwarden.NodeMinute
	var cur *gpuwarden.NodeMinute
	for _, s := range samples {
		m := s.Time.UTC().Truncate(time.Minute)
		if !m.Before(end) {
			break
		}
		if cur == nil || !cur.Minute.Equal(m) {
			finishMinute(cur)
			out = append(out, gpuwarden.NodeMinute{Minute: m})
			cur = &out[len(out)-1]
		}
		cur.Samples++
		cur.CPUPercent += s.Host.CPUPercent
		for len(cur.GPUUtil) < len(s.GPUs) {
			cur.GPUUtil = append(cur.GPUUtil, 0)
			cur.GPUMemPercent = append(cur.GPUMemPercent, 0)
		}
		for i, g := range s.GPUs {
			cur.GPUUtil[i] += g.UtilPercent
			if g.MemTotalBytes > 0 {
				cur.GPUMemPercent[i] += 100 * float64(g.MemUsedBytes) / float64(g.MemTotalBytes)
			}
		}
	}
	finishMinute(cur)
	return out
}

func finishMinute(m *gpuwarden.NodeMinute) {
	if m == nil || m.Samples == 0 {
		return
	}
	n := float64(m.Samples)
	m.CPUPercent = clampPercent(m.CPUPercent / n)
	for i := range m.GPUUtil {
		m.GPUUtil[i] = clampPercent(m.GPUUtil[i] / n)
		m.GPUMemPercent[i] = clampPercent(m.GPUMemPercent[i] / n)
	}
}

func clampPercent(v float64) float64 { return min(100, max(0, v)) }

// Where NodeIdentity reads the machine's identity.
var (
	bootIDPath     = "/proc/sys/kernel/random/boot_id"
	machineIDPaths = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}
)

// NodeIdentity returns what a registration says about the machine besides
// its node ID, so that the server can tell two boxes sending one ID apart
// (see gpuwarden.Node.InstanceID). instance is instanceID when the caller
// knows the cloud's; else "host-" and a hash of the host name, the
// machine-id (hashed, as systemd asks of anything that sends it off the
// box) and the agent's data dir, which also tells two agents on one host
// apart: each has its own ledger there. boot is the kernel's boot ID, ""
// where there is none.
func NodeIdentity(host, dataDir, instanceID string) (instance, boot string) {
	return nodeIdentity(host, dataDir, instanceID, os.ReadFile)
}

func nodeIdentity(host, dataDir, instanceID string, read func(string) ([]byte, error)) (instance, boot string) {
	if b, err := read(bootIDPath); err == nil {
		boot = strings.TrimSpace(string(b))
	}
	if instanceID = strings.TrimSpace(instanceID); instanceID != "" {
		return instanceID, boot
	}
	machine := ""
	for _, p := range machineIDPaths {
		if b, err := read(p); err == nil && strings.TrimSpace(string(b)) != "" {
			machine = strings.TrimSpace(string(b))
			break
		}
	}
	sum := sha256.Sum256([]byte("gpuwarden instance\x00" + host + "\x00" + machine + "\x00" + dataDir))
	return "host-" + hex.EncodeToString(sum[:8]), boot
}

// backoff is the wait after failures failed rounds: doubling from a second
// to a minute, then drawn from its upper half with r in [0, 1), so that a
// fleet whose server comes back does not return in step.
func backoff(failures int, r float64) time.Duration {
	d := min(time.Second<<min(max(failures, 1)-1, 6), time.Minute)
	return d/2 + time.Duration(r*float64(d/2))
}
