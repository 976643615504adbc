package http

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	nethttp "net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// nodeIDPattern is compiled on first use, by the fleet server: the agent,
// linked into the same binary, paid 100 KB for it at start (issue #19).
var nodeIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`) })

// Field limits of what an agent sends: generous for real boxes, small
// enough that no request can make a row enormous.
const (
	maxLabelLen = 256
	maxExtra    = 32
	maxGPUs     = 64
	// maxEventKinds caps ?kind=: each kind is one SQL parameter, and the
	// databases refuse a query with tens of thousands.
	maxEventKinds = 64
)

func (s *FleetServer) register(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	if !sc.canWriteNodes() {
		return gpuwarden.Errorf(gpuwarden.EForbidden, "a %s token cannot register nodes", sc.Role).WithHint("use an agent token")
	}
	var n gpuwarden.Node
	if err := decode(r, &n); err != nil {
		return err
	}
	if n.Project == "" || sc.Project != gpuwarden.AllProjects {
		if n.Project != "" && n.Project != sc.Project {
			return forbidden(n.Project)
		}
		n.Project = sc.Project
	}
	if err := validNode(n); err != nil {
		return err
	}
	if err := gpuwarden.CheckSince("labels.launched_at", n.Labels.LaunchedAt, s.now()); err != nil {
		return err
	}
	if !storableTime(n.Labels.LaunchedAt) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "labels.launched_at must lie in the years 0 to 9999 UTC")
	}
	if len(n.InstanceID) > maxLabelLen || len(n.BootID) > maxLabelLen {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "instance_id and boot_id are at most %d bytes", maxLabelLen)
	}
	n.TokenID = sc.ID
	n.Registered = s.now().UTC()
	// A node heard from within LostAfter is live: its ID is refused to
	// another instance until it is lost, the window the orphan report and
	// the dashboard use too, so that a box they show as running keeps it.
	n.LiveSince = n.Registered.Add(-s.LostAfter)
	stored, err := s.store.RegisterNode(r.Context(), n)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.EConflict {
		// 409 to the agent, which says so and retries; the log says it here
		// too, where two boxes sharing an ID would otherwise go unnoticed.
		s.log.Warn("node registration refused", "node", n.ID, "project", n.Project, "host", n.Hostname,
			"instance", n.InstanceID, "token", sc.ID, "err", err)
		return err
	}
	if err != nil {
		return err
	}
	s.nodes.remember(stored)
	s.log.Info("node registered", "node", stored.ID, "project", stored.Project, "host", stored.Hostname)
	return writeJSON(w, nethttp.StatusOK, stored)
}

func validNode(n gpuwarden.Node) error {
	if !nodeIDPattern().MatchString(n.ID) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "node id %q: use 1 to 128 letters, digits, '.', '_', ':' or '-'", n.ID)
	}
	if err := ValidProject(n.Project, false); err != nil {
		return err
	}
	l := n.Labels
	for name, v := range map[string]string{"hostname": n.Hostname, "owner": l.Owner, "provider": l.Provider,
		"region": l.Region, "instance_type": l.InstanceType, "agent_version": n.AgentVersion, "currency": string(l.Currency)} {
		if len(v) > maxLabelLen {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "%s is longer than %d bytes", name, maxLabelLen)
		}
	}
	if l.HourlyPrice < 0 || l.TTLSeconds < 0 {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "hourly_price and ttl_seconds cannot be negative")
	}
	if len(l.Extra) > maxExtra {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "more than %d extra labels", maxExtra)
	}
	for k, v := range l.Extra {
		if len(k) > maxLabelLen || len(v) > maxLabelLen {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "extra label %.40q is longer than %d bytes", k, maxLabelLen)
		}
	}
	if len(n.GPUs) > maxGPUs {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "more than %d GPUs", maxGPUs)
	}
	return nil
}

// writableNode checks that the token may write the node: its own agent
// token, or an admin of its project.
func (s *FleetServer) writableNode(ctx context.Context, sc scope, id string) error {
	if !sc.canWriteNodes() {
		return gpuwarden.Errorf(gpuwarden.EForbidden, "a %s token cannot write nodes", sc.Role)
	}
	o, err := s.nodes.owner(ctx, id)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return noNode(id)
	}
	if err != nil {
		return err
	}
	switch {
	case !sc.canRead(o.project):
		return noNode(id)
	case sc.Role == gpuwarden.RoleAgent && o.tokenID != sc.ID:
		return gpuwarden.Errorf(gpuwarden.EForbidden, "node %s belongs to another agent token", id).
			WithHint("an agent writes only the nodes it registered; revoke the old token to hand the node over")
	}
	return nil
}

func (s *FleetServer) heartbeat(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	var hb gpuwarden.Heartbeat
	if err := decode(r, &hb); err != nil {
		return err
	}
	if !agentState(hb.State) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "state %q is not one an agent reports", hb.State).
			WithHint("use %s", strings.Join(agentStates, ", "))
	}
	if !finite(hb.GPUUtil) || hb.GPUUtil < 0 || hb.GPUUtil > 100 || len(hb.Diagnosis) > maxLabelLen {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "gpu_util must be 0–100 and diagnosis at most %d bytes", maxLabelLen)
	}
	// Checked here rather than left to the ledger: heartbeats are committed
	// in groups, and one the ledger refuses would fail the whole group.
	now := s.now()
	if err := gpuwarden.CheckReported("time", hb.Time, now); err != nil {
		return err
	}
	if err := gpuwarden.CheckSince("idle_since", hb.IdleSince, now); err != nil {
		return err
	}
	if !storableTime(hb.IdleSince) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "idle_since must lie in the years 0 to 9999 UTC")
	}
	if err := validStop(hb.Stop, now); err != nil {
		return err
	}
	if err := s.writableNode(r.Context(), sc, hb.Node); err != nil {
		return err
	}
	if err := s.beats.write(r.Context(), hb); err != nil {
		return err
	}
	w.WriteHeader(nethttp.StatusNoContent)
	return nil
}

// agentStates are the states an agent's heartbeat may carry: lost is the
// server's to decide, gone a person's (markGone).
var agentStates = []string{gpuwarden.NodeRunning, gpuwarden.NodeStopping, gpuwarden.NodeStopped,
	gpuwarden.NodeStopRequested, gpuwarden.NodePoweredOffStillBilling, gpuwarden.NodeAgentStopped}

func agentState(state string) bool { return slices.Contains(agentStates, state) }

// Limits of a heartbeat's stop report: its sentences (why, fix, the
// provider's detail) run longer than a label.
const (
	maxStopText  = 2048
	maxStopItems = 32
)

// validStop checks a heartbeat's stop report: bounded text, a known
// billing state, a rate that is not negative, times a reply can carry.
func validStop(r *gpuwarden.StopReport, now time.Time) error {
	if r == nil {
		return nil
	}
	bad := func(format string, args ...any) error {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "stop: "+format, args...)
	}
	if len(r.Method) > maxLabelLen || len(r.Currency) > maxLabelLen || len(r.Why) > maxStopText || len(r.Fix) > maxStopText {
		return bad("method and currency are at most %d bytes, why and fix %d", maxLabelLen, maxStopText)
	}
	if r.StillBillsHourly < 0 {
		return bad("still_bills_hourly cannot be negative")
	}
	if len(r.StillBills) > maxStopItems || !shortAll(r.StillBills, maxLabelLen) {
		return bad("still_bills holds at most %d items of %d bytes", maxStopItems, maxLabelLen)
	}
	if p := r.Proof; p != nil {
		if len(p.Method) > maxLabelLen || len(p.Reason) > maxStopText || len(p.Fix) > maxStopText ||
			len(p.Checked) > maxStopItems || !shortAll(p.Checked, maxStopText) {
			return bad("proof: method at most %d bytes, reason and fix %d, checked %d items", maxLabelLen, maxStopText, maxStopItems)
		}
		if err := stopTime("stop.proof.at", p.At, now); err != nil {
			return err
		}
	}
	if o := r.Outcome; o != nil {
		if len(o.Method) > maxLabelLen || len(o.OperationID) > maxLabelLen || len(o.State) > maxLabelLen || len(o.Detail) > maxStopText {
			return bad("outcome: method, operation_id and state at most %d bytes, detail %d", maxLabelLen, maxStopText)
		}
		if o.HTTPStatus < 0 || o.HTTPStatus > 999 {
			return bad("outcome: http_status %d is not an HTTP status", o.HTTPStatus)
		}
		switch o.Billing {
		case "", gpuwarden.NodeRunning, gpuwarden.NodeStopped, gpuwarden.NodeStopRequested, gpuwarden.NodePoweredOffStillBilling:
		default:
			return bad("outcome: billing %q is not stopped, stop-requested, powered-off-still-billing or running", o.Billing)
		}
		if err := stopTime("stop.outcome.at", o.At, now); err != nil {
			return err
		}
	}
	return nil
}

// stopTime checks a time of the stop report: not ahead of the server's
// clock, and one a reply can carry.
func stopTime(what string, t, now time.Time) error {
	if err := gpuwarden.CheckSince(what, t, now); err != nil {
		return err
	}
	if !storableTime(t) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "%s must lie in the years 0 to 9999 UTC", what)
	}
	return nil
}

func shortAll(ss []string, n int) bool {
	for _, s := range ss {
		if len(s) > n {
			return false
		}
	}
	return true
}

func (s *FleetServer) batch(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	id := r.PathValue("id")
	if err := s.writableNode(r.Context(), sc, id); err != nil {
		return err
	}
	var b gpuwarden.FleetBatch
	if err := decode(r, &b); err != nil {
		return err
	}
	if err := validBatch(b, s.now()); err != nil {
		return err
	}
	start := time.Now()
	res, err := s.store.Ingest(r.Context(), id, b)
	if err != nil {
		return err
	}
	if res.Savings, err = s.ingestSavings(r.Context(), id, b.Savings); err != nil {
		return err
	}
	s.recordRightSize(r.Context(), id)
	s.metrics.ingest.Observe(time.Since(start).Seconds())
	return writeJSON(w, nethttp.StatusOK, res)
}

// maxSavingText bounds an event's evidence, rate source and reason.
const maxSavingText = 4096

// ingestSavings stores the savings an agent shipped for its node, by ID
// (a replay or a re-priced event replaces the stored one). The project and
// owner are the server's record of the node, never the agent's word, so
// that a token cannot book savings to another project.
func (s *FleetServer) ingestSavings(ctx context.Context, id string, events []gpuwarden.Saving) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	l, ok := s.store.(gpuwarden.SavingsLedger)
	if !ok {
		return 0, gpuwarden.Errorf(gpuwarden.EInvalid, "this server's ledger keeps no savings")
	}
	n, err := s.store.Node(ctx, id)
	if err != nil {
		return 0, err
	}
	out := make([]gpuwarden.Saving, len(events))
	for i, e := range events {
		bad := func(format string, args ...any) error {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "savings[%d]: "+format, append([]any{i}, args...)...)
		}
		switch {
		case e.Node != id:
			return 0, bad("node %q is not the batch's node %s", e.Node, id)
		case len(e.ID) > maxLabelLen || len(e.Currency) > 8:
			return 0, bad("id at most %d bytes, currency 8", maxLabelLen)
		case len(e.Evidence) > maxSavingText || len(e.RateSource) > maxSavingText || len(e.NotSaved) > maxSavingText:
			return 0, bad("evidence, rate_source and not_saved at most %d bytes", maxSavingText)
		case !storableTime(e.From) || !storableTime(e.To) || !storableTime(e.At):
			return 0, bad("from, to and at must lie in the years 0 to 9999 UTC")
		case math.IsNaN(e.Hours) || math.IsInf(e.Hours, 0) || e.Hours < 0 || e.Hours > 24*366:
			return 0, bad("hours %v is not a number of hours in a year", e.Hours)
		}
		if err := e.Validate(); err != nil {
			return 0, bad("%v", err)
		}
		e.Project, e.Owner = n.Project, n.Labels.Owner
		out[i] = e
	}
	if err := l.RecordSavings(ctx, out); err != nil {
		return 0, err
	}
	return len(out), nil
}

func validBatch(b gpuwarden.FleetBatch, now time.Time) error {
	if len(b.Minutes)+len(b.Events)+len(b.Savings) > maxBatchItems {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "a batch holds at most %d minutes, events and savings", maxBatchItems).WithHint("send smaller batches")
	}
	for i, m := range b.Minutes {
		switch {
		case m.Minute.IsZero() || !m.Minute.Equal(m.Minute.Truncate(time.Minute)):
			return gpuwarden.Errorf(gpuwarden.EInvalid, "minutes[%d]: minute %s is not on a minute", i, m.Minute.Format(time.RFC3339Nano))
		case gpuwarden.CheckReported(fmt.Sprintf("minutes[%d]: minute", i), m.Minute, now) != nil:
			return gpuwarden.CheckReported(fmt.Sprintf("minutes[%d]: minute", i), m.Minute, now)
		case m.Samples < 1 || len(m.GPUUtil) > maxGPUs || len(m.GPUMemPercent) > maxGPUs:
			return gpuwarden.Errorf(gpuwarden.EInvalid, "minutes[%d]: needs at least one sample and at most %d GPUs", i, maxGPUs)
		case !percent(m.CPUPercent) || !allPercent(m.GPUUtil) || !allPercent(m.GPUMemPercent):
			return gpuwarden.Errorf(gpuwarden.EInvalid, "minutes[%d]: percentages must be 0–100", i)
		}
	}
	for i, e := range b.Events {
		switch {
		case e.Seq <= 0:
			return gpuwarden.Errorf(gpuwarden.EInvalid, "events[%d]: seq must be positive", i)
		case e.Time.IsZero() || e.Kind == "" || len(e.Kind) > maxLabelLen || len(e.Key) > maxLabelLen || len(e.Severity) > maxLabelLen:
			return gpuwarden.Errorf(gpuwarden.EInvalid, "events[%d]: needs a time and a kind of at most %d bytes", i, maxLabelLen)
		case gpuwarden.CheckReported(fmt.Sprintf("events[%d]: time", i), e.Time, now) != nil:
			// A year-9999 event would top every event listing forever.
			return gpuwarden.CheckReported(fmt.Sprintf("events[%d]: time", i), e.Time, now)
		case len(e.Message) > gpuwarden.MaxEventMessage || e.DataSize() > gpuwarden.MaxEventData:
			return gpuwarden.Errorf(gpuwarden.EInvalid, "events[%d]: message or data too long", i)
		}
	}
	return nil
}

func finite(f float64) bool  { return !math.IsNaN(f) && !math.IsInf(f, 0) }
func percent(f float64) bool { return finite(f) && f >= 0 && f <= 100 }
func allPercent(fs []float64) bool {
	for _, f := range fs {
		if !percent(f) {
			return false
		}
	}
	return true
}

// storableTime reports whether t can be answered as JSON once stored:
// RFC 3339 has four-digit years, and an offset can carry a time parsed in
// range out of them once in UTC.
func storableTime(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

func (s *FleetServer) listNodes(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	p, err := sc.project(r.URL.Query().Get("project"))
	if err != nil {
		return err
	}
	nodes, err := s.store.Nodes(r.Context(), p)
	if err != nil {
		return err
	}
	if nodes == nil {
		nodes = []gpuwarden.Node{}
	}
	return writeJSON(w, nethttp.StatusOK, nodes)
}

func (s *FleetServer) getNode(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	n, err := s.store.Node(r.Context(), r.PathValue("id"))
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound || err == nil && !sc.canRead(n.Project) {
		return noNode(r.PathValue("id"))
	}
	if err != nil {
		return err
	}
	return writeJSON(w, nethttp.StatusOK, n)
}

// noNode is the one answer for a node ID a token cannot see, the same
// words for an ID nobody holds and for another project's node, so that no
// read or write by ID tells a token which IDs other projects use. Node IDs
// are fleet-wide (the ledger's key), so registering one that another
// project holds must still be refused: that 409 is the one answer that
// says an ID is in use elsewhere, and it says nothing more
// (fleetrow.CheckRegister).
func noNode(id string) error {
	return gpuwarden.Errorf(gpuwarden.ENotFound, "no node %s", id).
		WithHint("GET /api/v1/nodes lists the nodes this token sees; an agent registers its node with POST /api/v1/register")
}

func (s *FleetServer) listEvents(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	qv := r.URL.Query()
	p, err := sc.project(qv.Get("project"))
	if err != nil {
		return err
	}
	q := gpuwarden.EventQuery{Project: p, Node: qv.Get("node"), Limit: 100}
	if v := qv.Get("kind"); v != "" {
		q.Kinds = strings.Split(v, ",")
		if len(q.Kinds) > maxEventKinds {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "kind: at most %d kinds", maxEventKinds)
		}
	}
	if v := qv.Get("since"); v != "" {
		if q.Since, err = time.Parse(time.RFC3339, v); err != nil {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "since %q is not an RFC 3339 time", v)
		}
	}
	if v := qv.Get("limit"); v != "" {
		if q.Limit, err = strconv.Atoi(v); err != nil || q.Limit < 1 || q.Limit > 10000 {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "limit %q: use 1 to 10000", v)
		}
	}
	evs, err := s.store.Events(r.Context(), q)
	if err != nil {
		return err
	}
	if evs == nil {
		evs = []gpuwarden.NodeEvent{}
	}
	return writeJSON(w, nethttp.StatusOK, evs)
}

func (s *FleetServer) listProjects(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	all, err := s.store.Projects(r.Context())
	if err != nil {
		return err
	}
	out := []gpuwarden.Project{}
	for _, p := range all {
		if sc.canRead(p.Name) {
			out = append(out, p)
		}
	}
	return writeJSON(w, nethttp.StatusOK, out)
}

func (s *FleetServer) putProject(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	name := r.PathValue("name")
	if err := ValidProject(name, false); err != nil {
		return err
	}
	if !sc.canAdmin(name) {
		return gpuwarden.Errorf(gpuwarden.EForbidden, "only an admin of project %q may set its budget", name)
	}
	var p gpuwarden.Project
	if err := decode(r, &p); err != nil {
		return err
	}
	if p.Budget < 0 || len(p.Currency) != 3 || strings.ToUpper(string(p.Currency)) != string(p.Currency) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "budget must be ≥ 0 and currency an ISO 4217 code such as EUR")
	}
	p.Name, p.Created = name, s.now().UTC()
	if err := s.store.PutProject(r.Context(), p); err != nil {
		return err
	}
	return writeJSON(w, nethttp.StatusOK, p)
}

func (s *FleetServer) listTokens(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	p, err := sc.project(r.URL.Query().Get("project"))
	if err != nil {
		return err
	}
	if !sc.canAdmin(p) {
		return gpuwarden.Errorf(gpuwarden.EForbidden, "only an admin may list tokens")
	}
	ts, err := s.store.Tokens(r.Context(), p)
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []gpuwarden.Token{}
	}
	return writeJSON(w, nethttp.StatusOK, ts)
}

// CreatedToken is the answer to a token creation: the record and, this
// once, the secret.
type CreatedToken struct {
	gpuwarden.Token
	Secret string `json:"secret"`
}

func (s *FleetServer) createToken(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	var req struct {
		Project, Role, Name string
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Project == "" {
		req.Project = sc.Project
	}
	if !sc.canAdmin(req.Project) {
		return gpuwarden.Errorf(gpuwarden.EForbidden, "only an admin of project %q may create its tokens", req.Project)
	}
	if len(req.Name) > maxLabelLen {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "name is longer than %d bytes", maxLabelLen)
	}
	t, secret, err := NewToken(req.Project, req.Role, req.Name, s.now())
	if err != nil {
		return err
	}
	if err := s.store.CreateToken(r.Context(), t); err != nil {
		return err
	}
	s.auth.created(t.ID)
	s.log.Info("token created", "id", t.ID, "project", t.Project, "role", t.Role, "by", sc.ID)
	return writeJSON(w, nethttp.StatusCreated, CreatedToken{Token: t, Secret: secret})
}

func (s *FleetServer) revokeToken(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	id := r.PathValue("id")
	t, err := s.store.Token(r.Context(), id)
	if err != nil {
		return err
	}
	if !sc.canAdmin(t.Project) {
		return gpuwarden.Errorf(gpuwarden.EForbidden, "only an admin of project %q may revoke its tokens", t.Project)
	}
	if err := s.store.RevokeToken(r.Context(), id, s.now().UTC()); err != nil {
		return err
	}
	s.auth.forget(id)
	s.log.Info("token revoked", "id", id, "by", sc.ID)
	w.WriteHeader(nethttp.StatusNoContent)
	return nil
}

// nodeOwners caches which project and token each node belongs to, so that
// a heartbeat's permission check costs no database read. Ownership changes
// through RegisterNode, which refreshes the entry on its replica; another
// replica reads it again within nodeOwnerTTL.
type nodeOwners struct {
	store gpuwarden.Fleet
	now   func() time.Time
	mu    sync.Mutex
	m     map[string]nodeOwner
}

// nodeOwner is a node's project and writing token as read at read.
type nodeOwner struct {
	project, tokenID string
	// replaces is the node's replaces label (recordRightSize), so that a
	// batch of a node without it costs no read.
	replaces string
	read     time.Time
}

// nodeOwnerTTL bounds how long a node's owner is trusted without reading
// it again: a node handed to a new token through another replica is
// writable by that token here within this time, as a revocation is
// (tokenCacheTTL).
const nodeOwnerTTL = tokenCacheTTL

func (o *nodeOwners) remember(n gpuwarden.Node) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]nodeOwner{}
	}
	o.m[n.ID] = nodeOwner{project: n.Project, tokenID: n.TokenID, replaces: n.Labels.Extra[gpuwarden.LabelReplaces], read: o.clock()}
}

func (o *nodeOwners) clock() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}

func (o *nodeOwners) owner(ctx context.Context, id string) (nodeOwner, error) {
	o.mu.Lock()
	v, ok := o.m[id]
	o.mu.Unlock()
	if age := o.clock().Sub(v.read); ok && age >= 0 && age < nodeOwnerTTL {
		return v, nil
	}
	n, err := o.store.Node(ctx, id)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return nodeOwner{}, gpuwarden.Errorf(gpuwarden.ENotFound, "node %s is not registered", id).WithHint("POST /api/v1/register first")
	}
	if err != nil {
		return nodeOwner{}, err
	}
	o.remember(n)
	return nodeOwner{project: n.Project, tokenID: n.TokenID, replaces: n.Labels.Extra[gpuwarden.LabelReplaces], read: o.clock()}, nil
}

// beatWriter commits heartbeats in groups: while one transaction runs, the
// heartbeats that arrive queue up and go into the next one together, so
// that a thousand agents cost a few commits a second, and each request is
// answered only after its heartbeat is committed.
type beatWriter struct {
	store   gpuwarden.Fleet
	now     func() time.Time
	in      chan beatRequest
	log     *slog.Logger
	observe func(n int)
	// stopped is closed once run has returned, after it answered every
	// heartbeat it took: a later one is refused rather than left waiting
	// for a writer that is gone.
	stopped  chan struct{}
	stopOnce sync.Once
	// linger is how long the writer waits, after the first heartbeat of a
	// group, for more to join it before it commits (zero: it takes what is
	// queued). Every transaction costs a BEGIN and a commit whatever it
	// holds; at a few thousand heartbeats a second a group that commits at
	// once holds one or two, and those two cost the writer more than all
	// the rows (the bench fleet profile). Each request still waits for the
	// commit of its own group.
	linger time.Duration
}

// beatLinger is the writer's wait for a group: well inside the 50 ms p99
// budget, and at 5,000 heartbeats a second about ten join each group.
const beatLinger = 2 * time.Millisecond

type beatRequest struct {
	hb   gpuwarden.Heartbeat
	done chan error
}

func (b *beatWriter) write(ctx context.Context, hb gpuwarden.Heartbeat) error {
	req := beatRequest{hb: hb, done: make(chan error, 1)}
	select {
	case b.in <- req:
	case <-b.stopped:
		return errWriterStopped()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-b.stopped:
		// run answers what it took before it closes stopped; a request
		// queued after its last look is never taken.
		select {
		case err := <-req.done:
			return err
		default:
			return errWriterStopped()
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func errWriterStopped() error {
	return gpuwarden.Errorf(gpuwarden.EEnvironment, "the server is shutting down").WithHint("send the heartbeat again")
}

func (b *beatWriter) run(ctx context.Context) {
	defer b.stopOnce.Do(func() { close(b.stopped) })
	batch := make([]beatRequest, 0, maxHeartbeatBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			// Commit what is queued, so that no request waits on a writer
			// that is gone; write refuses what comes after.
			for {
				if batch = b.take(batch[:0]); len(batch) == 0 {
					return
				}
				b.commit(ctx, batch)
			}
		case req := <-b.in:
			batch = b.gather(append(batch[:0], req), timer)
			b.commit(ctx, b.take(batch))
		}
	}
}

// gather waits up to linger for more heartbeats to join batch, or until
// it is full; timer is stopped and drained.
func (b *beatWriter) gather(batch []beatRequest, timer *time.Timer) []beatRequest {
	if b.linger <= 0 {
		return batch
	}
	timer.Reset(b.linger)
	for len(batch) < maxHeartbeatBatch {
		select {
		case req := <-b.in:
			batch = append(batch, req)
		case <-timer.C:
			return batch
		}
	}
	if !timer.Stop() {
		<-timer.C
	}
	return batch
}

// take adds to batch the heartbeats queued now, up to a full batch.
func (b *beatWriter) take(batch []beatRequest) []beatRequest {
	for len(batch) < maxHeartbeatBatch {
		select {
		case req := <-b.in:
			batch = append(batch, req)
		default:
			return batch
		}
	}
	return batch
}

// commit stores a batch in one transaction and answers each request.
func (b *beatWriter) commit(ctx context.Context, batch []beatRequest) {
	hbs := make([]gpuwarden.Heartbeat, len(batch))
	for i, req := range batch {
		hbs[i] = req.hb
	}
	// The commit outlives a cancelled request: other requests share it.
	err := b.store.RecordHeartbeats(context.WithoutCancel(ctx), b.now().UTC(), hbs)
	if err != nil {
		b.log.Error("store heartbeats", "n", len(hbs), "err", err)
	} else if b.observe != nil {
		b.observe(len(hbs))
	}
	for _, req := range batch {
		req.done <- err
	}
}

// rateLimiter is a token bucket per API token: enough for any agent and
// dashboard, and a runaway script cannot starve the others.
type rateLimiter struct {
	now     func() time.Time
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// allow takes one request from the bucket of key, or says how long to wait.
func (l *rateLimiter) allow(key string, rate, burst float64) (time.Duration, bool) {
	if rate <= 0 {
		return 0, true
	}
	if burst < 1 {
		burst = 1
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*bucket{}
	}
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{tokens: burst, last: now}
		l.buckets[key] = b
	}
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = math.Min(burst, b.tokens+d*rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / rate * float64(time.Second)), false
}
