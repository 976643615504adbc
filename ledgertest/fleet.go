package ledgertest

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// FleetOpener opens a new, empty fleet ledger for one test, and a reopen
// func that opens the same store again (after the suite closed the first),
// so that the suite can check what survives a restart; the suite closes
// every fleet ledger it is given.
type FleetOpener func(t *testing.T) (f gpuwarden.Fleet, reopen func() gpuwarden.Fleet)

// RunFleet runs the fleet conformance suite against the ledgers open makes.
func RunFleet(t *testing.T, open FleetOpener) {
	tests := []struct {
		name string
		fn   func(*testing.T, *fleetStore)
	}{
		{"Projects", testProjects},
		{"Tokens", testTokens},
		{"Sessions", testSessions},
		{"SessionsRetain", testSessionsRetain},
		{"SessionsShared", testSessionsShared},
		{"RegisterNode", testRegisterNode},
		{"RegisterNodeIdentity", testRegisterIdentity},
		{"RegisterNodeIdentityRace", testRegisterIdentityRace},
		{"CreateFirstToken", testCreateFirstToken},
		{"Heartbeats", testHeartbeats},
		{"IngestIdempotent", testIngestIdempotent},
		{"IngestRefusesBadBatches", testIngestInvalid},
		{"CostFollowsPriceChange", testCost},
		{"HoursGPUMeans", testHours},
		{"EventsFilterAndOrder", testFleetEvents},
		{"Retain", testRetain},
		{"ReopenKeepsEverything", testFleetReopen},
		{"ConcurrentIngest", testConcurrentIngest},
		{"UnstorableTextRefusedAlike", testUnstorableText},
		{"StopHeartbeats", testStopHeartbeats},
		{"StopHandsTheIDOn", testStopHandsTheIDOn},
		{"SpendAfterStop", testSpendAfterStop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newFleetStore(t, open))
		})
	}
}

// fleetStore is one test's fleet ledger and the way to reopen it.
type fleetStore struct {
	t      *testing.T
	f      gpuwarden.Fleet
	reopen func() gpuwarden.Fleet
}

func newFleetStore(t *testing.T, open FleetOpener) *fleetStore {
	f, reopen := open(t)
	s := &fleetStore{t: t, f: f, reopen: reopen}
	t.Cleanup(func() {
		if s.f != nil {
			_ = s.f.Close()
		}
	})
	return s
}

// restart closes the ledger and opens the same store again.
func (s *fleetStore) restart() {
	s.t.Helper()
	err := s.f.Close()
	s.f = nil
	if err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	s.f = s.reopen()
}

// FleetStart is the fleet suite's clock: a whole hour, so that minutes after
// it fall in predictable hours.
var FleetStart = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// FleetNode is a registered-looking node of project with n GPUs, priced at
// price per hour in USD, registered by token at FleetStart.
func FleetNode(id, project, token string, price gpuwarden.Micros, n int) gpuwarden.Node {
	node := gpuwarden.Node{
		ID: id, Project: project, Hostname: id + ".example", TokenID: token, AgentVersion: "1.0.0",
		Registered: FleetStart,
		Labels: gpuwarden.NodeLabels{Owner: "ana", Provider: "aws", Region: "us-east-1",
			InstanceType: "p5.48xlarge", HourlyPrice: price, Currency: "USD", Spot: true, TTLSeconds: 3600,
			LaunchedAt: FleetStart.Add(-5 * time.Minute), Extra: map[string]string{"team": "vision"}},
	}
	for i := range n {
		node.GPUs = append(node.GPUs, gpuwarden.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", id, i),
			Name: "NVIDIA H200", Model: "H200", VRAMBytes: 141 << 30, ComputeCapability: "9.0"})
	}
	return node
}

// FleetMinute is one shipped minute at FleetStart plus off, with the given
// per-GPU utilisations.
func FleetMinute(off time.Duration, util ...float64) gpuwarden.NodeMinute {
	mem := make([]float64, len(util))
	for i := range mem {
		mem[i] = 50
	}
	return gpuwarden.NodeMinute{Minute: FleetStart.Add(off), Samples: 60, CPUPercent: 12.5, GPUUtil: util, GPUMemPercent: mem}
}

func register(t *testing.T, f gpuwarden.Fleet, nodes ...gpuwarden.Node) {
	t.Helper()
	for _, n := range nodes {
		if _, err := f.RegisterNode(context.Background(), n); err != nil {
			t.Fatalf("RegisterNode(%s): %v", n.ID, err)
		}
	}
}

func ingest(t *testing.T, f gpuwarden.Fleet, node string, b gpuwarden.FleetBatch) gpuwarden.BatchResult {
	t.Helper()
	res, err := f.Ingest(context.Background(), node, b)
	if err != nil {
		t.Fatalf("Ingest(%s): %v", node, err)
	}
	return res
}

func hours(t *testing.T, f gpuwarden.Fleet, project string, from, to time.Time) []gpuwarden.NodeHour {
	t.Helper()
	got, err := f.Hours(context.Background(), project, from, to)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func allHours(t *testing.T, f gpuwarden.Fleet) []gpuwarden.NodeHour {
	t.Helper()
	return hours(t, f, gpuwarden.AllProjects, time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
}

// wantCode checks that err carries code.
func wantCode(t *testing.T, what string, err error, code gpuwarden.ErrorCode) {
	t.Helper()
	if got := gpuwarden.ErrorCodeOf(err); got != code {
		t.Errorf("%s = %v (code %q), want code %q", what, err, got, code)
	}
}

func testProjects(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	steps := []gpuwarden.Project{
		{Name: "vision", Budget: 100_000, Currency: "USD", Created: FleetStart},
		{Name: "audio", Budget: 0, Currency: "EUR", Created: FleetStart.Add(time.Hour)},
		// An update changes the budget and keeps the creation time.
		{Name: "vision", Budget: 250_000, Currency: "USD", Created: FleetStart.Add(48 * time.Hour)},
	}
	for _, p := range steps {
		if err := s.f.PutProject(ctx, p); err != nil {
			t.Fatalf("PutProject(%s): %v", p.Name, err)
		}
	}
	want := []gpuwarden.Project{steps[1], {Name: "vision", Budget: 250_000, Currency: "USD", Created: FleetStart}}
	for _, reopen := range []bool{false, true} {
		if reopen {
			s.restart()
		}
		got, err := s.f.Projects(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reopen %v: Projects =\n%+v\nwant\n%+v", reopen, got, want)
		}
	}
	wantCode(t, "PutProject(no name)", s.f.PutProject(ctx, gpuwarden.Project{}), gpuwarden.EInvalid)
}

func testTokens(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	hash := []byte{0xde, 0xad, 0xbe, 0xef}
	toks := []gpuwarden.Token{
		{ID: "tv2", Project: "vision", Role: gpuwarden.RoleViewer, Created: FleetStart, Hash: hash},
		{ID: "tv1", Project: "vision", Role: gpuwarden.RoleAgent, Name: "ci agents", Created: FleetStart, Hash: hash},
		{ID: "ta1", Project: "audio", Role: gpuwarden.RoleAdmin, Created: FleetStart.Add(time.Minute), Hash: hash},
		{ID: "root", Project: gpuwarden.AllProjects, Role: gpuwarden.RoleAdmin, Created: FleetStart, Hash: hash},
	}
	for _, tok := range toks {
		if err := s.f.CreateToken(ctx, tok); err != nil {
			t.Fatalf("CreateToken(%s): %v", tok.ID, err)
		}
	}
	dup := toks[0]
	dup.Project = "audio"
	wantCode(t, "CreateToken(taken id)", s.f.CreateToken(ctx, dup), gpuwarden.EConflict)
	wantCode(t, "CreateToken(no id)", s.f.CreateToken(ctx, gpuwarden.Token{Project: "audio"}), gpuwarden.EInvalid)

	revoked := FleetStart.Add(time.Hour)
	if err := s.f.RevokeToken(ctx, "tv1", revoked); err != nil {
		t.Fatal(err)
	}
	// A second revocation keeps the first time.
	if err := s.f.RevokeToken(ctx, "tv1", revoked.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "RevokeToken(unknown)", s.f.RevokeToken(ctx, "nope", revoked), gpuwarden.ENotFound)
	tv1 := toks[1]
	tv1.Revoked = revoked
	s.restart()

	for _, tt := range []struct {
		id   string
		want gpuwarden.Token
	}{
		{"tv1", tv1},
		{"tv2", toks[0]},
		{"root", toks[3]},
	} {
		got, err := s.f.Token(ctx, tt.id)
		if err != nil {
			t.Fatalf("Token(%s): %v", tt.id, err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Token(%s) =\n%+v\nwant\n%+v", tt.id, got, tt.want)
		}
	}
	_, err := s.f.Token(ctx, "nope")
	wantCode(t, "Token(unknown)", err, gpuwarden.ENotFound)

	for _, tt := range []struct {
		project string
		want    []gpuwarden.Token
	}{
		{"vision", []gpuwarden.Token{tv1, toks[0]}},
		{"audio", []gpuwarden.Token{toks[2]}},
		{gpuwarden.AllProjects, []gpuwarden.Token{toks[3], toks[2], tv1, toks[0]}},
		{"none", nil},
	} {
		got, err := s.f.Tokens(ctx, tt.project)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Tokens(%s) =\n%+v\nwant\n%+v", tt.project, got, tt.want)
		}
	}
}

func testRegisterNode(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	for _, tok := range []gpuwarden.Token{
		{ID: "a1", Project: "vision", Role: gpuwarden.RoleAgent, Created: FleetStart},
		{ID: "a2", Project: "vision", Role: gpuwarden.RoleAgent, Created: FleetStart},
		{ID: "b1", Project: "audio", Role: gpuwarden.RoleAgent, Created: FleetStart},
	} {
		if err := s.f.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	first := FleetNode("n1", "vision", "a1", 3_500_000, 2)
	// A re-registration by the same token: new hostname, labels, GPUs and
	// version, and a later Registered that must not replace the first.
	again := FleetNode("n1", "vision", "a1", 4_000_000, 4)
	again.Hostname, again.AgentVersion, again.Registered = "renamed", "1.1.0", FleetStart.Add(time.Hour)
	again.Labels.Extra = nil
	againStored := again
	againStored.Registered = FleetStart
	handed := again
	handed.TokenID = "a2"
	handedStored := againStored
	handedStored.TokenID = "a2"

	steps := []struct {
		name   string
		revoke string // a token to revoke before the step
		node   gpuwarden.Node
		want   gpuwarden.Node
		code   gpuwarden.ErrorCode
	}{
		{"new node", "", first, first, ""},
		{"re-register", "", again, againStored, ""},
		{"another project's node", "", FleetNode("n1", "audio", "b1", 1, 0), gpuwarden.Node{}, gpuwarden.EConflict},
		{"another token", "", handed, gpuwarden.Node{}, gpuwarden.EConflict},
		{"after the holder is revoked", "a1", handed, handedStored, ""},
		{"the revoked holder again", "", again, gpuwarden.Node{}, gpuwarden.EConflict},
		{"no id", "", gpuwarden.Node{Project: "vision"}, gpuwarden.Node{}, gpuwarden.EInvalid},
		{"second node", "", FleetNode("n0", "vision", "a2", 1, 0), FleetNode("n0", "vision", "a2", 1, 0), ""},
		{"other project", "", FleetNode("m1", "audio", "b1", 1, 1), FleetNode("m1", "audio", "b1", 1, 1), ""},
	}
	for _, st := range steps {
		if st.revoke != "" {
			if err := s.f.RevokeToken(ctx, st.revoke, FleetStart.Add(2*time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.f.RegisterNode(ctx, st.node)
		wantCode(t, st.name+": RegisterNode", err, st.code)
		if !reflect.DeepEqual(got, st.want) {
			t.Errorf("%s: RegisterNode =\n%+v\nwant\n%+v", st.name, got, st.want)
		}
	}
	s.restart()
	got, err := s.f.Node(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, handedStored) {
		t.Errorf("Node(n1) =\n%+v\nwant\n%+v", got, handedStored)
	}
	_, err = s.f.Node(ctx, "nope")
	wantCode(t, "Node(unknown)", err, gpuwarden.ENotFound)
	for _, tt := range []struct {
		project string
		want    []string
	}{
		{"vision", []string{"n0", "n1"}},
		{"audio", []string{"m1"}},
		{gpuwarden.AllProjects, []string{"m1", "n0", "n1"}},
		{"none", nil},
	} {
		nodes, err := s.f.Nodes(ctx, tt.project)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, n := range nodes {
			ids = append(ids, n.ID)
		}
		if !reflect.DeepEqual(ids, tt.want) {
			t.Errorf("Nodes(%s) = %v, want %v", tt.project, ids, tt.want)
		}
	}
}

func testHeartbeats(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	register(t, s.f, FleetNode("n1", "vision", "a", 1, 1), FleetNode("n2", "vision", "a", 1, 1))
	hb := func(node string, off time.Duration, state string, util float64) gpuwarden.Heartbeat {
		return gpuwarden.Heartbeat{Node: node, Time: FleetStart.Add(off), State: state, GPUUtil: util}
	}
	at1 := FleetStart.Add(10*time.Second + 123*time.Millisecond)
	at2 := at1.Add(time.Minute)
	idle := hb("n1", 9*time.Second, gpuwarden.NodeRunning, 0)
	idle.IdleSince, idle.Diagnosis = FleetStart, "idle"
	steps := []struct {
		at  time.Time
		hbs []gpuwarden.Heartbeat
	}{
		// An unknown node is skipped; of two heartbeats of n1 the later counts.
		{at1, []gpuwarden.Heartbeat{hb("n1", 5*time.Second, gpuwarden.NodeRunning, 90), hb("ghost", 0, gpuwarden.NodeRunning, 1),
			hb("n2", 8*time.Second, gpuwarden.NodeStopping, 10), idle}},
		{at2, []gpuwarden.Heartbeat{hb("n2", time.Minute, gpuwarden.NodeStopped, 0)}},
		{at2.Add(time.Minute), nil},
	}
	for i, st := range steps {
		if err := s.f.RecordHeartbeats(ctx, st.at, st.hbs); err != nil {
			t.Fatalf("step %d: RecordHeartbeats: %v", i, err)
		}
	}
	// A re-registration keeps the last heartbeat.
	register(t, s.f, FleetNode("n1", "vision", "a", 2, 1))
	s.restart()
	tests := []struct {
		node     string
		lastSeen time.Time
		live     gpuwarden.Heartbeat
	}{
		{"n1", at1, idle},
		{"n2", at2, steps[1].hbs[0]},
	}
	for _, tt := range tests {
		n, err := s.f.Node(ctx, tt.node)
		if err != nil {
			t.Fatal(err)
		}
		if !n.LastSeen.Equal(tt.lastSeen) || !reflect.DeepEqual(n.Live, tt.live) {
			t.Errorf("%s: LastSeen %v, Live %+v; want %v, %+v", tt.node, n.LastSeen, n.Live, tt.lastSeen, tt.live)
		}
	}
	if _, err := s.f.Node(ctx, "ghost"); gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
		t.Errorf("Node(ghost) = %v, want not found: a heartbeat must not create a node", err)
	}
}

// sampleBatch is three minutes of hour 10 for two GPUs and two events.
func sampleBatch() gpuwarden.FleetBatch {
	return gpuwarden.FleetBatch{
		Minutes: []gpuwarden.NodeMinute{FleetMinute(0, 10, 20), FleetMinute(time.Minute, 30, 40), FleetMinute(2*time.Minute, 50, 60)},
		Events: []gpuwarden.Event{
			{Seq: 1, Time: FleetStart, Kind: "idle", Severity: gpuwarden.SeverityInfo, Message: "idle"},
			{Seq: 2, Time: FleetStart.Add(time.Minute), Kind: "budget", Severity: gpuwarden.SeverityWarning, Message: "80%",
				Key: "budget-80", Data: map[string]string{"spent": "80"}},
		},
	}
}

func testIngestIdempotent(t *testing.T, s *fleetStore) {
	register(t, s.f, FleetNode("n1", "vision", "a", 3_600_000, 2))
	wantHours := []gpuwarden.NodeHour{{Node: "n1", Hour: FleetStart, Minutes: 3, Cost: 180_000, Currency: "USD", GPUUtil: []float64{30, 40}}}
	b := sampleBatch()
	replay := sampleBatch()
	// The same minute twice in one batch counts once.
	replay.Minutes = append(replay.Minutes, FleetMinute(time.Minute+30*time.Second, 99, 99))
	mixed := gpuwarden.FleetBatch{
		Minutes: []gpuwarden.NodeMinute{FleetMinute(2*time.Minute, 1, 1), FleetMinute(3*time.Minute, 70, 80)},
		Events:  []gpuwarden.Event{b.Events[1], {Seq: 3, Time: FleetStart.Add(3 * time.Minute), Kind: "idle"}},
	}
	steps := []struct {
		name  string
		batch gpuwarden.FleetBatch
		want  gpuwarden.BatchResult
		hours []gpuwarden.NodeHour
	}{
		{"first", b, gpuwarden.BatchResult{Minutes: 3, Events: 2}, wantHours},
		{"the same batch again", b, gpuwarden.BatchResult{Duplicates: 5}, wantHours},
		{"again with an in-batch duplicate", replay, gpuwarden.BatchResult{Duplicates: 6}, wantHours},
		{"half old, half new", mixed, gpuwarden.BatchResult{Minutes: 1, Events: 1, Duplicates: 2},
			[]gpuwarden.NodeHour{{Node: "n1", Hour: FleetStart, Minutes: 4, Cost: 240_000, Currency: "USD", GPUUtil: []float64{40, 50}}}},
		{"empty", gpuwarden.FleetBatch{}, gpuwarden.BatchResult{},
			[]gpuwarden.NodeHour{{Node: "n1", Hour: FleetStart, Minutes: 4, Cost: 240_000, Currency: "USD", GPUUtil: []float64{40, 50}}}},
	}
	for _, st := range steps {
		if got := ingest(t, s.f, "n1", st.batch); got != st.want {
			t.Errorf("%s: Ingest = %+v, want %+v", st.name, got, st.want)
		}
		if got := allHours(t, s.f); !reflect.DeepEqual(got, st.hours) {
			t.Errorf("%s: Hours =\n%+v\nwant\n%+v", st.name, got, st.hours)
		}
	}
}

func testIngestInvalid(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	register(t, s.f, FleetNode("n1", "vision", "a", 3_600_000, 2))
	good := FleetMinute(0, 10, 20)
	tests := []struct {
		name  string
		node  string
		batch gpuwarden.FleetBatch
		code  gpuwarden.ErrorCode
	}{
		{"unknown node", "ghost", sampleBatch(), gpuwarden.ENotFound},
		{"unknown node, empty batch", "ghost", gpuwarden.FleetBatch{}, gpuwarden.ENotFound},
		{"event without seq", "n1", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{good},
			Events: []gpuwarden.Event{{Time: FleetStart, Kind: "idle"}}}, gpuwarden.EInvalid},
		{"minute without time", "n1", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{good, {Samples: 1}}}, gpuwarden.EInvalid},
	}
	for _, tt := range tests {
		res, err := s.f.Ingest(ctx, tt.node, tt.batch)
		wantCode(t, tt.name+": Ingest", err, tt.code)
		if res != (gpuwarden.BatchResult{}) {
			t.Errorf("%s: Ingest = %+v, want nothing counted", tt.name, res)
		}
	}
	// A refused batch stores nothing, so its good minute is new afterwards.
	if got := allHours(t, s.f); got != nil {
		t.Errorf("Hours after refused batches = %+v, want none", got)
	}
	events, err := s.f.Events(ctx, gpuwarden.EventQuery{})
	if err != nil || events != nil {
		t.Errorf("Events after refused batches = %+v, %v; want none", events, err)
	}
	if got := ingest(t, s.f, "n1", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{good}}); got.Minutes != 1 {
		t.Errorf("Ingest(good minute) = %+v, want it new", got)
	}
}

func testCost(t *testing.T, s *fleetStore) {
	node := FleetNode("n1", "vision", "a", 1_000_000, 0) // 1 USD/h
	register(t, s.f, node)
	mins := func(from, n int) gpuwarden.FleetBatch {
		var b gpuwarden.FleetBatch
		for i := from; i < from+n; i++ {
			b.Minutes = append(b.Minutes, FleetMinute(time.Duration(i)*time.Minute))
		}
		return b
	}
	steps := []struct {
		name  string
		price gpuwarden.Micros // the node's price before the step
		batch gpuwarden.FleetBatch
		cost  gpuwarden.Micros // the hour's cost after it
	}{
		{"30 minutes at 1/h", 1_000_000, mins(0, 30), 500_000},
		{"30 more at 2/h", 2_000_000, mins(30, 30), 1_500_000},
		// 100 micros/h is 1.67 a minute: summing rounded minutes would
		// give 2, 4, 6; the exact hour gives 2, 3, 5.
		{"a cheap minute rounds half away", 100, mins(60, 1), 2},
		{"two cheap minutes are not two rounded ones", 100, mins(61, 1), 3},
		{"three", 100, mins(62, 1), 5},
	}
	for _, st := range steps {
		node.Labels.HourlyPrice = st.price
		register(t, s.f, node)
		ingest(t, s.f, "n1", st.batch)
		got := allHours(t, s.f)
		if len(got) == 0 || got[len(got)-1].Cost != st.cost {
			t.Errorf("%s: Hours = %+v, want the last hour to cost %v", st.name, got, st.cost)
		}
	}
	node.Labels.Currency = "EUR"
	register(t, s.f, node)
	ingest(t, s.f, "n1", mins(120, 1))
	if got := allHours(t, s.f); len(got) != 3 || got[2].Currency != "EUR" || got[0].Currency != "USD" {
		t.Errorf("Hours = %+v, want 3 hours, the last in EUR", got)
	}
}

func testHours(t *testing.T, s *fleetStore) {
	register(t, s.f, FleetNode("b", "vision", "a", 6_000_000, 2), FleetNode("a", "vision", "a", 600_000, 3),
		FleetNode("c", "audio", "c", 60_000_000, 1))
	h := time.Hour
	// Node b: two minutes in hour 10 (GPU 1 reports only in the first),
	// one in hour 12. Node a: one minute in hour 11. Node c, another
	// project: one minute in hour 10.
	ingest(t, s.f, "b", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{
		FleetMinute(2*h+5*time.Minute, 100), FleetMinute(0, 10, 20), FleetMinute(59*time.Minute, 30)}})
	ingest(t, s.f, "a", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{FleetMinute(h+30*time.Minute, 1, 2, 3)}})
	ingest(t, s.f, "c", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{FleetMinute(0, 5)}})
	a11 := gpuwarden.NodeHour{Node: "a", Hour: FleetStart.Add(h), Minutes: 1, Cost: 10_000, Currency: "USD", GPUUtil: []float64{1, 2, 3}}
	b10 := gpuwarden.NodeHour{Node: "b", Hour: FleetStart, Minutes: 2, Cost: 200_000, Currency: "USD", GPUUtil: []float64{20, 20}}
	b12 := gpuwarden.NodeHour{Node: "b", Hour: FleetStart.Add(2 * h), Minutes: 1, Cost: 100_000, Currency: "USD", GPUUtil: []float64{100}}
	c10 := gpuwarden.NodeHour{Node: "c", Hour: FleetStart, Minutes: 1, Cost: 1_000_000, Currency: "USD", GPUUtil: []float64{5}}
	tests := []struct {
		name     string
		project  string
		from, to time.Time
		want     []gpuwarden.NodeHour
	}{
		{"project, all hours", "vision", FleetStart.Add(-h), FleetStart.Add(3 * h), []gpuwarden.NodeHour{a11, b10, b12}},
		{"every project", gpuwarden.AllProjects, FleetStart, FleetStart.Add(3 * h), []gpuwarden.NodeHour{a11, b10, b12, c10}},
		{"to is exclusive", "vision", FleetStart, FleetStart.Add(2 * h), []gpuwarden.NodeHour{a11, b10}},
		{"from inside an hour skips it", "vision", FleetStart.Add(time.Minute), FleetStart.Add(3 * h), []gpuwarden.NodeHour{a11, b12}},
		{"other project", "audio", FleetStart, FleetStart.Add(3 * h), []gpuwarden.NodeHour{c10}},
		{"unknown project", "none", FleetStart, FleetStart.Add(3 * h), nil},
		{"empty range", "vision", FleetStart.Add(3 * h), FleetStart.Add(4 * h), nil},
	}
	for _, tt := range tests {
		if got := hours(t, s.f, tt.project, tt.from, tt.to); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Hours =\n%+v\nwant\n%+v", tt.name, got, tt.want)
		}
	}
}

func testFleetEvents(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	register(t, s.f, FleetNode("n1", "vision", "a", 1, 0), FleetNode("n2", "vision", "a", 1, 0), FleetNode("m1", "audio", "b", 1, 0))
	ev := func(seq int64, off time.Duration, kind string) gpuwarden.Event {
		return gpuwarden.Event{Seq: seq, Time: FleetStart.Add(off), Kind: kind, Severity: gpuwarden.SeverityInfo,
			Message: fmt.Sprintf("%s %d", kind, seq)}
	}
	n1 := []gpuwarden.Event{ev(1, 0, "idle"), ev(2, time.Minute, "budget"), ev(3, 3*time.Minute, "idle"), ev(4, 3*time.Minute, "stop")}
	n1[1].Key, n1[1].Data = "budget-80", map[string]string{"spent": "80.00", "limit": "100.00"}
	n2 := []gpuwarden.Event{ev(7, 2*time.Minute, "idle"), ev(8, 3*time.Minute, "preemption")}
	m1 := []gpuwarden.Event{ev(1, 90*time.Second, "idle")}
	// Shipped out of order, in two batches for n1.
	ingest(t, s.f, "n1", gpuwarden.FleetBatch{Events: []gpuwarden.Event{n1[2], n1[0]}})
	ingest(t, s.f, "n1", gpuwarden.FleetBatch{Events: []gpuwarden.Event{n1[3], n1[1]}})
	ingest(t, s.f, "n2", gpuwarden.FleetBatch{Events: n2})
	ingest(t, s.f, "m1", gpuwarden.FleetBatch{Events: m1})
	ne := func(node string, e gpuwarden.Event) gpuwarden.NodeEvent {
		return gpuwarden.NodeEvent{Node: node, Event: e}
	}
	// Newest first; in one millisecond by node, then the later seq first.
	all := []gpuwarden.NodeEvent{ne("n1", n1[3]), ne("n1", n1[2]), ne("n2", n2[1]), ne("n2", n2[0]),
		ne("m1", m1[0]), ne("n1", n1[1]), ne("n1", n1[0])}
	tests := []struct {
		name string
		q    gpuwarden.EventQuery
		want []gpuwarden.NodeEvent
	}{
		{"everything", gpuwarden.EventQuery{}, all},
		{"every project", gpuwarden.EventQuery{Project: gpuwarden.AllProjects}, all},
		{"project", gpuwarden.EventQuery{Project: "vision"}, []gpuwarden.NodeEvent{all[0], all[1], all[2], all[3], all[5], all[6]}},
		{"node", gpuwarden.EventQuery{Node: "n2"}, []gpuwarden.NodeEvent{all[2], all[3]}},
		{"kinds", gpuwarden.EventQuery{Kinds: []string{"idle", "preemption"}}, []gpuwarden.NodeEvent{all[1], all[2], all[3], all[4], all[6]}},
		{"since is inclusive", gpuwarden.EventQuery{Since: FleetStart.Add(2 * time.Minute)}, all[:4]},
		{"limit", gpuwarden.EventQuery{Limit: 3}, all[:3]},
		{"everything together", gpuwarden.EventQuery{Project: "vision", Node: "n1", Kinds: []string{"idle", "budget"},
			Since: FleetStart.Add(time.Minute), Limit: 2}, []gpuwarden.NodeEvent{all[1], all[5]}},
		{"other project's node", gpuwarden.EventQuery{Project: "audio", Node: "n1"}, nil},
		{"unknown kind", gpuwarden.EventQuery{Kinds: []string{"nope"}}, nil},
	}
	for _, tt := range tests {
		got, err := s.f.Events(ctx, tt.q)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Events =\n%+v\nwant\n%+v", tt.name, got, tt.want)
		}
	}
}

func testRetain(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	register(t, s.f, FleetNode("n1", "vision", "a", 60_000_000, 1))
	day := 24 * time.Hour
	now := FleetStart.Add(500 * day)
	// Minutes and events at whole hours before now, so each is its own hour.
	offsets := []time.Duration{401 * day, 399 * day, 36 * day, 34 * day}
	var b gpuwarden.FleetBatch
	for i, off := range offsets {
		b.Minutes = append(b.Minutes, gpuwarden.NodeMinute{Minute: now.Add(-off), Samples: 1, GPUUtil: []float64{50}})
		b.Events = append(b.Events, gpuwarden.Event{Seq: int64(i + 1), Time: now.Add(-off), Kind: "k"})
	}
	ingest(t, s.f, "n1", b)
	for range 2 { // a second Retain finds nothing more to drop
		if err := s.f.Retain(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	var gotHours []time.Duration
	for _, h := range allHours(t, s.f) {
		gotHours = append(gotHours, now.Sub(h.Hour))
	}
	if want := offsets[1:]; !reflect.DeepEqual(gotHours, want) {
		t.Errorf("hours kept at %v before now, want %v", gotHours, want)
	}
	events, err := s.f.Events(ctx, gpuwarden.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var gotSeqs []int64
	for _, e := range events {
		gotSeqs = append(gotSeqs, e.Seq)
	}
	if want := []int64{4, 3, 2}; !reflect.DeepEqual(gotSeqs, want) {
		t.Errorf("events kept %v, want %v", gotSeqs, want)
	}
	// Minutes went after 35 days: replaying the batch finds the 34-day
	// minute and event still stored, the rest new again.
	if got, want := ingest(t, s.f, "n1", gpuwarden.FleetBatch{Minutes: b.Minutes}),
		(gpuwarden.BatchResult{Minutes: 3, Duplicates: 1}); got != want {
		t.Errorf("replay after Retain = %+v, want %+v", got, want)
	}
}

func testFleetReopen(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	if err := s.f.PutProject(ctx, gpuwarden.Project{Name: "vision", Budget: 5, Currency: "USD", Created: FleetStart}); err != nil {
		t.Fatal(err)
	}
	if err := s.f.CreateToken(ctx, gpuwarden.Token{ID: "a", Project: "vision", Role: gpuwarden.RoleAgent, Created: FleetStart, Hash: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	register(t, s.f, FleetNode("n1", "vision", "a", 3_600_000, 2))
	if err := s.f.RecordHeartbeats(ctx, FleetStart, []gpuwarden.Heartbeat{{Node: "n1", Time: FleetStart, State: gpuwarden.NodeRunning}}); err != nil {
		t.Fatal(err)
	}
	ingest(t, s.f, "n1", sampleBatch())
	type snapshot struct {
		Projects []gpuwarden.Project
		Tokens   []gpuwarden.Token
		Nodes    []gpuwarden.Node
		Hours    []gpuwarden.NodeHour
		Events   []gpuwarden.NodeEvent
	}
	take := func() snapshot {
		var sn snapshot
		var err error
		if sn.Projects, err = s.f.Projects(ctx); err != nil {
			t.Fatal(err)
		}
		if sn.Tokens, err = s.f.Tokens(ctx, gpuwarden.AllProjects); err != nil {
			t.Fatal(err)
		}
		if sn.Nodes, err = s.f.Nodes(ctx, gpuwarden.AllProjects); err != nil {
			t.Fatal(err)
		}
		sn.Hours = allHours(t, s.f)
		if sn.Events, err = s.f.Events(ctx, gpuwarden.EventQuery{}); err != nil {
			t.Fatal(err)
		}
		return sn
	}
	before := take()
	if len(before.Projects) != 1 || len(before.Tokens) != 1 || len(before.Nodes) != 1 || len(before.Hours) != 1 || len(before.Events) != 2 {
		t.Fatalf("before reopen: %+v, want one project, token, node and hour and two events", before)
	}
	s.restart()
	if after := take(); !reflect.DeepEqual(after, before) {
		t.Errorf("after reopen:\n%+v\nwant\n%+v", after, before)
	}
	if got, want := ingest(t, s.f, "n1", sampleBatch()), (gpuwarden.BatchResult{Duplicates: 5}); got != want {
		t.Errorf("replay after reopen = %+v, want %+v", got, want)
	}
}

func testConcurrentIngest(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	const writers, minutes = 4, 90
	register(t, s.f, FleetNode("n1", "vision", "a", 6_000_000, 2), FleetNode("n2", "vision", "a", 6_000_000, 2))
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := map[string]gpuwarden.BatchResult{}
	errs := make(chan error, 4*writers)
	for w := range writers {
		for _, node := range []string{"n1", "n2"} {
			wg.Go(func() {
				// Every writer sends every minute, in batches of 10 that
				// start at different offsets, so the batches overlap.
				for start := w * 3; start < minutes+w*3; start += 10 {
					var b gpuwarden.FleetBatch
					for i := start; i < start+10; i++ {
						m := i % minutes
						b.Minutes = append(b.Minutes, FleetMinute(time.Duration(m)*time.Minute, 10, 30))
						b.Events = append(b.Events, gpuwarden.Event{Seq: int64(m + 1), Time: FleetStart.Add(time.Duration(m) * time.Minute), Kind: "k"})
					}
					res, err := s.f.Ingest(ctx, node, b)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					r := total[node]
					r.Minutes, r.Events, r.Duplicates = r.Minutes+res.Minutes, r.Events+res.Events, r.Duplicates+res.Duplicates
					total[node] = r
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			for i := range 10 {
				hbs := []gpuwarden.Heartbeat{{Node: "n2", State: gpuwarden.NodeRunning}, {Node: "n1", State: gpuwarden.NodeRunning}}
				if err := s.f.RecordHeartbeats(ctx, FleetStart.Add(time.Duration(i)*time.Second), hbs); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := gpuwarden.BatchResult{Minutes: minutes, Events: minutes, Duplicates: 2 * minutes * (writers - 1)}
	for _, node := range []string{"n1", "n2"} {
		if got := total[node]; got != want {
			t.Errorf("%s: Ingest results add up to %+v, want %+v (each minute and event new exactly once)", node, got, want)
		}
	}
	got := allHours(t, s.f)
	var wantHours []gpuwarden.NodeHour
	for _, node := range []string{"n1", "n2"} {
		wantHours = append(wantHours,
			gpuwarden.NodeHour{Node: node, Hour: FleetStart, Minutes: 60, Cost: 6_000_000, Currency: "USD", GPUUtil: []float64{10, 30}},
			gpuwarden.NodeHour{Node: node, Hour: FleetStart.Add(time.Hour), Minutes: 30, Cost: 3_000_000, Currency: "USD", GPUUtil: []float64{10, 30}})
	}
	if !reflect.DeepEqual(got, wantHours) {
		t.Errorf("Hours =\n%+v\nwant\n%+v", got, wantHours)
	}
}

// testUnstorableText holds both ledgers to one answer for text PostgreSQL
// cannot store (NUL, invalid UTF-8) and SQLite would: a write is invalid,
// which the agent's shipper skips event by event, rather than an internal
// error that would stall its queue on one database only; a lookup finds
// nothing; a heartbeat of such a node is one of an unknown node.
func testUnstorableText(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	register(t, s.f, FleetNode("n1", "vision", "a", 1, 1))
	at := FleetStart.Add(time.Minute)
	for _, bad := range []string{"a\x00b", "a\xffb"} {
		name := fmt.Sprintf("%q", bad)
		badHost := FleetNode("n2", "vision", "a", 1, 1)
		badHost.Hostname = bad
		badOwner := FleetNode("n2", "vision", "a", 1, 1)
		badOwner.Labels.Owner = bad
		for _, n := range []gpuwarden.Node{FleetNode(bad, "vision", "a", 1, 1), badHost, badOwner, FleetNode("n2", "vision", bad, 1, 1)} {
			_, err := s.f.RegisterNode(ctx, n)
			wantCode(t, name+": RegisterNode", err, gpuwarden.EInvalid)
		}
		wantCode(t, name+": PutProject", s.f.PutProject(ctx, gpuwarden.Project{Name: bad, Currency: "USD"}), gpuwarden.EInvalid)
		wantCode(t, name+": CreateToken", s.f.CreateToken(ctx, gpuwarden.Token{ID: "t", Project: "vision", Name: bad}), gpuwarden.EInvalid)
		for _, e := range []gpuwarden.Event{{Seq: 1, Kind: "k", Message: bad}, {Seq: 1, Kind: bad}, {Seq: 1, Kind: "k", Key: bad}} {
			res, err := s.f.Ingest(ctx, "n1", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{FleetMinute(0, 1)}, Events: []gpuwarden.Event{e}})
			wantCode(t, name+": Ingest(event)", err, gpuwarden.EInvalid)
			if res != (gpuwarden.BatchResult{}) {
				t.Errorf("%s: Ingest(event) = %+v, want nothing counted", name, res)
			}
		}
		_, err := s.f.Ingest(ctx, bad, gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{FleetMinute(0, 1)}})
		wantCode(t, name+": Ingest(node)", err, gpuwarden.ENotFound)
		_, err = s.f.Node(ctx, bad)
		wantCode(t, name+": Node", err, gpuwarden.ENotFound)
		_, err = s.f.Token(ctx, bad)
		wantCode(t, name+": Token", err, gpuwarden.ENotFound)
		wantCode(t, name+": RevokeToken", s.f.RevokeToken(ctx, bad, at), gpuwarden.ENotFound)
		if err := s.f.RecordHeartbeats(ctx, at, []gpuwarden.Heartbeat{{Node: bad, State: gpuwarden.NodeRunning},
			{Node: "n1", State: gpuwarden.NodeRunning}}); err != nil {
			t.Errorf("%s: RecordHeartbeats = %v, want the unknown node skipped", name, err)
		}
	}
	if n, err := s.f.Node(ctx, "n1"); err != nil || !n.LastSeen.Equal(at) {
		t.Errorf("Node(n1) = LastSeen %v, %v; want %v", n.LastSeen, err, at)
	}
	if got := allHours(t, s.f); got != nil {
		t.Errorf("Hours after refused batches = %+v, want none", got)
	}
	if events, err := s.f.Events(ctx, gpuwarden.EventQuery{}); err != nil || events != nil {
		t.Errorf("Events after refused batches = %+v, %v; want none", events, err)
	}
	if ps, err := s.f.Projects(ctx); err != nil || ps != nil {
		t.Errorf("Projects = %+v, %v; want none", ps, err)
	}
	if ts, err := s.f.Tokens(ctx, gpuwarden.AllProjects); err != nil || ts != nil {
		t.Errorf("Tokens = %+v, %v; want none", ts, err)
	}
	if ns, err := s.f.Nodes(ctx, gpuwarden.AllProjects); err != nil || len(ns) != 1 {
		t.Errorf("Nodes = %+v, %v; want n1 alone", ns, err)
	}
}
