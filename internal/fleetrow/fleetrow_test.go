package fleetrow

import (
	"cmp"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestCost(t *testing.T) {
	tests := []struct {
		priceMinutes int64
		want         gpuwarden.Micros
	}{
		{0, 0},
		{60 * 1_000_000, 1_000_000}, // an hour at a steady price costs it exactly
		{100, 2},                    // 1.67
		{90, 2},                     // 1.5 rounds away from zero
		{89, 1},
		{-90, -2},
		{-89, -1},
	}
	for _, tt := range tests {
		if got := Cost(tt.priceMinutes); got != tt.want {
			t.Errorf("Cost(%d) = %d, want %d", tt.priceMinutes, got, tt.want)
		}
	}
}

func TestFloorHourBefore1970(t *testing.T) {
	tests := []struct{ ms, want int64 }{
		{0, 0},
		{hourMs + 1, hourMs},
		{-1, -hourMs},
		{-hourMs, -hourMs},
	}
	for _, tt := range tests {
		if got := FloorHour(tt.ms); got != tt.want {
			t.Errorf("FloorHour(%d) = %d, want %d", tt.ms, got, tt.want)
		}
	}
}

func TestTimeRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, int(5*time.Millisecond), time.FixedZone("CET", 3600))
	for _, tt := range []struct {
		in, want time.Time
	}{
		{time.Time{}, time.Time{}},
		{at, at.UTC()},
	} {
		if got := Time(Ms(tt.in)); !got.Equal(tt.want) || got.Location() != time.UTC {
			t.Errorf("Time(Ms(%v)) = %v, want %v in UTC", tt.in, got, tt.want)
		}
	}
}

func TestHeartbeatsLastWinsSortedByNode(t *testing.T) {
	hbs := []gpuwarden.Heartbeat{
		{Node: "b", State: "running"},
		{Node: "a", State: "running"},
		{Node: "", State: "no node"},
		{Node: "b", State: "stopped"},
	}
	ids, lives, err := Heartbeats(hbs)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	if want := `{"node":"b","time":"0001-01-01T00:00:00Z","state":"stopped","gpu_util":0}`; lives[1] != want {
		t.Errorf("lives[1] = %s, want %s", lives[1], want)
	}
}

func TestHours(t *testing.T) {
	h := hourMs
	minutes := []MinuteRow{
		{MinuteMs: 0, Samples: 60, CPU: 10, GPUUtil: []float64{10, 20}, GPUMem: []float64{5, 6}},
		{MinuteMs: minuteMs, Samples: 59, CPU: 20, GPUUtil: []float64{30}, GPUMem: []float64{7, 8}},
		{MinuteMs: h, Samples: 1, GPUUtil: nil},
		{MinuteMs: h + minuteMs, Samples: 60, CPU: 1.5, GPUUtil: []float64{1, 2, 3}, GPUMem: []float64{9}},
	}
	hours, gpus := Hours(minutes, 600, "USD")
	wantHours := []HourRow{{0, 2, 1200, "USD", 119, 30}, {h, 2, 1200, "USD", 61, 1.5}}
	// Memory counts only where its GPU has a utilisation: minute 1's second
	// GPU has none, so its 8 is not added.
	wantGPUs := []GPUHourRow{{0, 0, 2, 40, 12}, {0, 1, 1, 20, 6}, {h, 0, 1, 1, 9}, {h, 1, 1, 2, 0}, {h, 2, 1, 3, 0}}
	if !reflect.DeepEqual(hours, wantHours) {
		t.Errorf("hours = %+v, want %+v", hours, wantHours)
	}
	if !reflect.DeepEqual(gpus, wantGPUs) {
		t.Errorf("gpus = %+v, want %+v", gpus, wantGPUs)
	}
}

func TestFresh(t *testing.T) {
	h := hourMs
	minutes := []MinuteRow{{MinuteMs: 0}, {MinuteMs: 2 * minuteMs}, {MinuteMs: 59 * minuteMs}, {MinuteMs: h}, {MinuteMs: h + 3*minuteMs},
		{MinuteMs: -minuteMs}}
	slices.SortFunc(minutes, func(a, b MinuteRow) int { return cmp.Compare(a.MinuteMs, b.MinuteMs) })
	tests := []struct {
		name      string
		stored    map[int64]int64
		wantFresh []int64
		wantSets  []MinuteSet
	}{
		{"nothing stored", nil, []int64{-minuteMs, 0, 2 * minuteMs, 59 * minuteMs, h, h + 3*minuteMs},
			[]MinuteSet{{-h, 1 << 59}, {0, 1 | 1<<2 | 1<<59}, {h, 1 | 1<<3}}},
		{"a replay", map[int64]int64{-h: 1 << 59, 0: 1 | 1<<2 | 1<<59, h: 1 | 1<<3}, nil, nil},
		{"part stored", map[int64]int64{0: 1 << 2, h: 1<<3 | 1<<10}, []int64{-minuteMs, 0, 59 * minuteMs, h},
			[]MinuteSet{{-h, 1 << 59}, {0, 1 | 1<<59}, {h, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fresh, sets := Fresh(minutes, tt.stored)
			var got []int64
			for _, m := range fresh {
				got = append(got, m.MinuteMs)
			}
			if !reflect.DeepEqual(got, tt.wantFresh) {
				t.Errorf("fresh = %v, want %v", got, tt.wantFresh)
			}
			if !reflect.DeepEqual(sets, tt.wantSets) {
				t.Errorf("sets = %v, want %v", sets, tt.wantSets)
			}
		})
	}
	if got, want := SetHours(minutes), []int64{-h, 0, h}; !reflect.DeepEqual(got, want) {
		t.Errorf("SetHours = %v, want %v", got, want)
	}
}

func TestEventsSQLArgs(t *testing.T) {
	since := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	_, args := EventsSQL(gpuwarden.EventQuery{Project: "p", Node: "n", Kinds: []string{"a", "b"}, Since: since, Limit: 5})
	if want := []any{"p", "n", "a", "b", since.UnixMilli(), int64(5)}; !reflect.DeepEqual(args, want) {
		t.Errorf("args = %v, want %v", args, want)
	}
	if _, args := EventsSQL(gpuwarden.EventQuery{Project: gpuwarden.AllProjects}); args != nil {
		t.Errorf("AllProjects args = %v, want none", args)
	}
}

// TestHeartbeatsStopInUTC: the stop report's times are stored in UTC, so
// that both databases read back one value, and the caller's report is not
// touched.
func TestHeartbeatsStopInUTC(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	at := time.Date(2026, 11, 29, 11, 0, 0, 0, cet)
	stop := &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, Proof: &gpuwarden.StopProof{Proven: true, At: at},
		Outcome: &gpuwarden.StopOutcome{HTTPStatus: 202, Billing: gpuwarden.NodeStopped, At: at}}
	_, lives, err := Heartbeats([]gpuwarden.Heartbeat{{Node: "a", State: gpuwarden.NodeStopped, Stop: stop}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"node":"a","time":"0001-01-01T00:00:00Z","state":"stopped","gpu_util":0,"stop":{"method":"azure-deallocate","stops_billing":false,` +
		`"proof":{"method":"","proven":true,"at":"2026-11-29T10:00:00Z"},` +
		`"outcome":{"method":"","http_status":202,"billing":"stopped","at":"2026-11-29T10:00:00Z"},"still_bills_hourly":0}}`
	if lives[0] != want {
		t.Errorf("live = %s\nwant   %s", lives[0], want)
	}
	if stop.Proof.At.Location() != cet || stop.Outcome.At.Location() != cet {
		t.Error("Heartbeats changed the caller's stop report")
	}
}

func TestHolderStoppedHandsTheIDOn(t *testing.T) {
	for _, tt := range []struct {
		live string
		want bool
	}{
		{"", false},
		{`{"state":"running"}`, false},
		{`{"state":"stopping"}`, false},
		{`{"state":"lost"}`, false},
		{`{"state":"stopped"}`, true},
		{`{"state":"stop-requested"}`, true},
		{`{"state":"powered-off-still-billing"}`, true},
		{`{"state":"gone"}`, true},
		{`{"state":"agent-stopped"}`, true},
		{`not json`, false},
	} {
		h := NodeHolder{}
		h.Live.String, h.Live.Valid = tt.live, tt.live != ""
		if got := h.stopped(); got != tt.want {
			t.Errorf("stopped(%s) = %v, want %v", tt.live, got, tt.want)
		}
	}
}
