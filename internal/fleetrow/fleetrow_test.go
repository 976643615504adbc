package fleetrow

import (
	"reflect"
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
		{MinuteMs: 0, GPUUtil: []float64{10, 20}},
		{MinuteMs: minuteMs, GPUUtil: []float64{30}},
		{MinuteMs: h, GPUUtil: nil},
		{MinuteMs: h + minuteMs, GPUUtil: []float64{1, 2, 3}},
	}
	hours, gpus := Hours(minutes, 600, "USD")
	wantHours := []HourRow{{0, 2, 1200, "USD"}, {h, 2, 1200, "USD"}}
	wantGPUs := []GPUHourRow{{0, 0, 2, 40}, {0, 1, 1, 20}, {h, 0, 1, 1}, {h, 1, 1, 2}, {h, 2, 1, 3}}
	if !reflect.DeepEqual(hours, wantHours) {
		t.Errorf("hours = %+v, want %+v", hours, wantHours)
	}
	if !reflect.DeepEqual(gpus, wantGPUs) {
		t.Errorf("gpus = %+v, want %+v", gpus, wantGPUs)
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
